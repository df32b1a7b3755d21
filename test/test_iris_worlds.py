"""
benchmarks/iris_worlds.py: the bridge's iris drives every rotor as ardupilot_gazebo's plugin did.

The truth is the installed iris_with_ardupilot/model.sdf (ardupilot_gazebo, from
../shared/tools/gz-harmonic), read here on its own: each ArduPilotPlugin <control> must have
become a JointController on its joint with the plugin's PID gains and torque limits, a
ros_gz_bridge entry carrying the command to it (a std_msgs/Float64 per rotor, or element k of
one actuator_msgs/Actuators), and a channel of the bridge's preset with the control's PWM
range, multiplier (sign included) and offset; the preset must load as the node loads it. No
ROS or Gazebo needed; skips in one line where the model is not installed.
"""

import os
import sys
from typing import Dict, List
from xml.etree import ElementTree

import pytest
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'benchmarks'))

import iris_worlds  # noqa: E402
from ardupilot_json_bridge.config import config_from_parameters, load_parameters_file  # noqa

INSTALLED = '/opt/gz/harmonic/share/ardupilot_gazebo/models'
PLUGIN_MODEL = os.path.join(INSTALLED, 'iris_with_ardupilot', 'model.sdf')
INSTANCE = 7


@pytest.fixture(scope='module')
def model() -> str:
    if not os.path.isfile(PLUGIN_MODEL):
        pytest.skip(f'needs ardupilot_gazebo installed from ../shared/tools/gz-harmonic (no '
                    f'{PLUGIN_MODEL})')
    with open(PLUGIN_MODEL) as stream:
        return stream.read()


def controls_of(text: str) -> List[Dict[str, str]]:
    """Return the ArduPilotPlugin's <control> blocks: every setting as text, the channel."""
    root = ElementTree.fromstring(text)
    (plugin,) = [p for p in root.iter('plugin') if p.get('filename') == 'ArduPilotPlugin']
    return [{'channel': c.get('channel'), **{s.tag: s.text.strip() for s in c}}
            for c in plugin.findall('control')]


def canonical(element: ElementTree.Element) -> str:
    """Return the element as canonical XML, whitespace between elements left out."""
    return ElementTree.canonicalize(ElementTree.tostring(element, encoding='unicode'),
                                    strip_text=True)


def iris(world: str) -> ElementTree.Element:
    (model,) = [m for m in ElementTree.fromstring(world).iter('model')
                if m.get('name') == 'iris']
    return model


def test_the_installed_plugin_drives_four_rotors_with_signed_multipliers(model):
    """What the mirror has to reproduce, stated by hand from ardupilot_gazebo's model.sdf."""
    controls = controls_of(model)
    assert [(c['channel'], c['jointName'], float(c['multiplier'])) for c in controls] == [
        ('0', 'iris_with_standoffs::rotor_0_joint', 838.0),
        ('1', 'iris_with_standoffs::rotor_1_joint', 838.0),
        ('2', 'iris_with_standoffs::rotor_2_joint', -838.0),
        ('3', 'iris_with_standoffs::rotor_3_joint', -838.0)]
    assert {(c['type'], c['useForce'], c['servo_min'], c['servo_max'], c['offset'])
            for c in controls} == {('VELOCITY', '1', '1100', '1900', '0')}


@pytest.mark.parametrize('kind', ['float64', 'actuators'])
def test_every_plugin_control_became_the_same_joint_command(model, tmp_path, kind):
    """float64: a Float64 topic per rotor; actuators: element k of one Actuators message."""
    controls = controls_of(model)
    world = iris_worlds.bridge_world(model, kind)
    body = iris(world)
    assert not [p for p in body.iter('plugin') if p.get('filename') == 'ArduPilotPlugin']
    controllers = {}
    for include in body.findall('include'):
        scope = include.findtext('uri').rsplit('/', 1)[-1]
        for plugin in include.findall('plugin'):
            if plugin.get('name') == 'gz::sim::systems::JointController':
                settings = {s.tag: s.text for s in plugin}
                controllers[f'{scope}::{settings["joint_name"]}'] = settings
    assert sorted(controllers) == sorted(c['jointName'] for c in controls)
    topics = yaml.safe_load(iris_worlds.ros_gz_bridge_config(iris_worlds.plugin_controls(model),
                                                             kind))
    to_gazebo = {t['gz_topic_name']: t for t in topics if t['direction'] == 'ROS_TO_GZ'}
    preset = tmp_path / 'preset.yaml'
    preset.write_text(iris_worlds.bridge_preset(iris_worlds.plugin_controls(model), INSTANCE,
                                                kind))
    group = yaml.safe_load(preset.read_text())['/**']['ros__parameters']['outputs']['rotors']
    assert group['type'] == kind
    message = {'float64': ('std_msgs/msg/Float64', 'gz.msgs.Double'),
               'actuators': ('actuator_msgs/msg/Actuators', 'gz.msgs.Actuators')}[kind]
    for control in controls:
        controller = controllers[control['jointName']]
        assert controller['use_force_commands'] == 'true'
        for gain in ('p_gain', 'i_gain', 'd_gain', 'i_max', 'i_min', 'cmd_max', 'cmd_min'):
            assert float(controller[gain]) == float(control[gain]), (control, gain)
        entry = to_gazebo[controller['topic']]
        assert (entry['ros_type_name'], entry['gz_type_name']) == message
        namespace, ros_topic = entry['ros_topic_name'].lstrip('/').split('/', 1)
        assert namespace == 'quad'   # gazebo.launch.py's namespace of the bridge
        if kind == 'float64':
            assert 'use_actuator_msg' not in controller
            index = group['topics'].index(ros_topic)
        else:
            assert controller['use_actuator_msg'] == 'true'
            assert (group['topic'], group['field']) == (ros_topic, 'velocity')
            index = int(controller['actuator_number'])
        assert group['channels'][index] == int(control['channel']) + 1   # SERVO1 is channel 0
        for setting in ('servo_min', 'servo_max', 'multiplier', 'offset'):
            assert group[setting][index] == float(control[setting]), (control, setting)
    # The node reads the preset as written: full PWM is each rotor's signed multiplier,
    # 1500 us half of it (ardupilot_gazebo: multiplier * ((pwm - min) / (max - min) + offset)).
    config = config_from_parameters(load_parameters_file(str(preset)))
    assert config.link.instance == INSTANCE
    assert config.inputs.imu_mounting_rpy == (180.0, 0.0, 0.0)   # the FRD IMU of the iris
    (rotors,) = config.outputs
    assert [s.command(1900) for s in rotors.scalings] == [838.0, 838.0, -838.0, -838.0]
    assert [s.command(1500) for s in rotors.scalings] == [419.0, 419.0, -419.0, -419.0]
    assert [s.command(1000) for s in rotors.scalings] == [0.0] * 4


def test_both_worlds_carry_the_same_iris_but_for_the_plugin(model):
    """Same links, lift-drag, joints and odometry; the plugin listens for SITL instance N."""
    plugin_body = iris(iris_worlds.plugin_world(model, INSTANCE))
    (ardupilot,) = [p for p in plugin_body.findall('plugin')
                    if p.get('filename') == 'ArduPilotPlugin']
    assert ardupilot.findtext('fdm_port_in') == str(9002 + 10 * INSTANCE)
    assert controls_of(ElementTree.tostring(plugin_body, encoding='unicode')) == \
        controls_of(model)
    plugin_body.remove(ardupilot)
    bridge_body = iris(iris_worlds.bridge_world(model))
    for include in bridge_body.findall('include'):
        for plugin in include.findall('plugin'):
            include.remove(plugin)
    assert canonical(plugin_body) == canonical(bridge_body)
    names = [p.get('name') for p in bridge_body.findall('plugin')]
    assert names.count('gz::sim::systems::LiftDrag') == 8
    assert names.count('gz::sim::systems::OdometryPublisher') == 1


def test_a_model_without_the_plugin_is_one_clear_error():
    with pytest.raises(iris_worlds.ModelError, match='0 ArduPilotPlugin elements, not one'):
        iris_worlds.bridge_world('<sdf><model name="x"/></sdf>')
    with pytest.raises(iris_worlds.ModelError, match='is not XML'):
        iris_worlds.plugin_controls('<sdf')


def test_an_iris_whose_mesh_is_missing_is_named(tmp_path):
    """ardupilot_gazebo's snapshot lacks iris.dae: Gazebo would refuse the world, silently."""
    for name in ('iris_with_ardupilot', 'iris_with_standoffs/meshes'):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / 'iris_with_ardupilot' / 'model.sdf').write_text('<sdf/>')
    (tmp_path / 'iris_with_standoffs' / 'model.sdf').write_text(
        '<sdf><model><link><visual><geometry><mesh>'
        '<uri>model://iris_with_standoffs/meshes/iris.dae</uri></mesh></geometry></visual>'
        '</link></model></sdf>')
    assert 'model://iris_with_standoffs/meshes/iris.dae, which is missing' in \
        iris_worlds.loadable(str(tmp_path))
    (tmp_path / 'iris_with_standoffs' / 'meshes' / 'iris.dae').write_text('')
    assert iris_worlds.loadable(str(tmp_path)) is None
    assert 'no iris_with_ardupilot/model.sdf' in iris_worlds.loadable(str(tmp_path / 'none'))
