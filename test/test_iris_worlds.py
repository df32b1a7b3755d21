"""
benchmarks/iris_worlds.py: the bridge's iris drives every rotor as ardupilot_gazebo's plugin did.

The truth is the installed iris_with_ardupilot/model.sdf (ardupilot_gazebo, from
../shared/tools/gz-harmonic), read here on its own: each ArduPilotPlugin <control> must have
become a JointController on its joint with the plugin's PID gains and torque limits, a
ros_gz_bridge entry carrying the command to it (a std_msgs/Float64 per rotor, or element k of
one actuator_msgs/Actuators), and a channel of the bridge's preset with the control's PWM
range, multiplier (sign included) and offset; the preset must load as the node loads it. The
IMU bridged is the plugin's <imuName> sensor, mounted as its pose in iris_with_standoffs says.
Also benchmarks/gazebo_side_by_side.py's pure parts (roles, setups, verdict, a bad model). No
ROS or Gazebo needed; skips in one line where the model is not installed.
"""

import math
import os
import sys
from typing import Dict, List, Tuple
from xml.etree import ElementTree

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'benchmarks'))

from ardupilot_json_bridge.config import (  # noqa: E402
    config_from_parameters, load_parameters_file)
import gazebo_side_by_side as side  # noqa: E402
import iris_worlds  # noqa: E402

INSTALLED = '/opt/gz/harmonic/share/ardupilot_gazebo/models'
PLUGIN_MODEL = os.path.join(INSTALLED, 'iris_with_ardupilot', 'model.sdf')
STANDOFFS_MODEL = os.path.join(INSTALLED, 'iris_with_standoffs', 'model.sdf')
INSTANCE = 7


@pytest.fixture(scope='module')
def model() -> str:
    if not os.path.isfile(PLUGIN_MODEL):
        pytest.skip(f'needs ardupilot_gazebo installed from ../shared/tools/gz-harmonic (no '
                    f'{PLUGIN_MODEL})')
    with open(PLUGIN_MODEL) as stream:
        return stream.read()


@pytest.fixture(scope='module')
def standoffs(model) -> str:
    with open(STANDOFFS_MODEL) as stream:
        return stream.read()


def imu_of(text: str, standoffs_text: str) -> Tuple[str, Tuple[float, float, float]]:
    """Return the plugin's IMU as Gazebo publishes it (default topic) and its pose's angles."""
    root = ElementTree.fromstring(text)
    (plugin,) = [p for p in root.iter('plugin') if p.get('filename') == 'ArduPilotPlugin']
    scope, link, sensor = plugin.findtext('imuName').strip().split('::')
    (element,) = [s for ln in ElementTree.fromstring(standoffs_text).iter('link')
                  if ln.get('name') == link for s in ln.iter('sensor')
                  if s.get('name') == sensor]
    assert element.find('topic') is None   # else Gazebo publishes there
    pose = element.find('pose')
    angles = [float(v) for v in pose.text.split()[3:]]
    if pose.get('degrees') != 'true':
        angles = [math.degrees(a) for a in angles]
    return (f'/world/iris_side/model/iris/model/{scope}/link/{link}/sensor/{sensor}/imu',
            tuple(angles))


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
def test_every_plugin_control_became_the_same_joint_command(model, standoffs, tmp_path, kind):
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
    files = side.bridge_files(model, standoffs, INSTANCE, kind)
    topics = yaml.safe_load(files['ros_gz_bridge.yaml'])
    to_gazebo = {t['gz_topic_name']: t for t in topics if t['direction'] == 'ROS_TO_GZ'}
    preset = tmp_path / 'preset.yaml'
    preset.write_text(files['preset.yaml'])
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
    # The IMU: the plugin's sensor, on Gazebo's topic for it, mounted as model.sdf says.
    imu_topic, mounting = imu_of(model, standoffs)
    assert config.inputs.imu_mounting_rpy == pytest.approx(mounting)
    assert mounting == pytest.approx((180.0, 0.0, 0.0))   # ardupilot_gazebo's FRD IMU
    (imu,) = [t for t in topics if t['ros_type_name'] == 'sensor_msgs/msg/Imu']
    assert (imu['gz_topic_name'], imu['direction']) == (imu_topic, 'GZ_TO_ROS')
    assert imu['ros_topic_name'] == f'/quad/{config.inputs.imu_topic}'
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


def test_an_imu_the_plugin_does_not_name_is_one_clear_error(model, standoffs):
    other = model.replace('imu_link::imu_sensor</imuName>', 'imu_link::other_imu</imuName>')
    assert other != model
    with pytest.raises(iris_worlds.ModelError, match='0 IMU sensors imu_link::other_imu'):
        iris_worlds.imu(other, standoffs)


def test_a_model_that_loads_but_cannot_be_mirrored_is_one_line_and_leaves_nothing(
        tmp_path, monkeypatch):
    """The pre-check builds every world; a round given such a model cleans its folder up."""
    models = tmp_path / 'models'
    for name in ('iris_with_ardupilot', 'iris_with_standoffs'):
        (models / name).mkdir(parents=True)
        (models / name / 'model.sdf').write_text(f'<sdf><model name="{name}"/></sdf>')
    reason = side.unbuildable(['plugin', 'bridge:0.5'], 50, str(models))
    assert reason.endswith('0 ArduPilotPlugin elements, not one') and '\n' not in reason
    assert side.unbuildable(['plugin', 'bridge:0.5'], 50, str(tmp_path / 'none')) is not None
    scratch = tmp_path / 'scratch'
    scratch.mkdir()
    monkeypatch.setattr(side.tempfile, 'tempdir', str(scratch))
    bad = '<sdf version="1.9"><model name="iris_with_ardupilot"/></sdf>'
    for setup in ('plugin', 'bridge:0.5'):
        result = side.fly_round(setup, bad, bad, 50, 5.0, 60.0, 0)
        assert not result.ok and 'ArduPilotPlugin' in result.why
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize('command, role', [
    (['gz sim -r -s -z 500 /tmp/side/bridge.sdf'], 'gazebo'),   # as gz sim rewrites itself
    (['ruby', '/opt/gz/harmonic/bin/gz', 'sim', '-r', '-s', '/tmp/w.sdf'], 'gazebo'),
    (['/opt/gz/harmonic/ros/lib/ros_gz_sim/gz_server', '--ros-args', '-p', 'x:=1'], 'gazebo'),
    (['/bin/sh', '-c', 'gz sim -r -s /tmp/w.sdf'], 'gazebo'),
    (['/usr/bin/python3', '/x/lib/ardupilot_json_bridge/bridge', '--ros-args'], 'node'),
    (['/usr/bin/python3', '-m', 'ardupilot_json_bridge.link.link_process'], 'link'),
    (['/x/lib/ros_gz_bridge/parameter_bridge', '--ros-args'], 'ros_gz_bridge'),
    (['/usr/bin/python3', '/x/some_helper'], 'other')])
def test_every_process_of_a_launch_has_a_role_in_the_loop(command, role):
    """What role_of does not know is 'other', in the loop's CPU (and warned about)."""
    assert side.role_of(command) == role
    result = side.Round('bridge', ok=True, sim_seconds=10.0, wall_seconds=10.0,
                        cpu={role: 5.0, 'launch': 1.0})
    assert result.loop_cpu == 5.0
    assert ('WARNING' in side.describe(result)) == (role == 'other')


def test_setups_and_their_paces():
    assert side.parse_setup('plugin') == (None, 1.0)
    assert side.parse_setup('plugin:0.5') == (None, 0.5)
    assert side.parse_setup('bridge:0.5') == (iris_worlds.FLOAT64, 0.5)
    assert side.parse_setup('bridge-actuators-lockstep') == (iris_worlds.ACTUATORS, None)
    for bad in ('plugin-lockstep', 'plugin:2', 'bridge-lockstep:0.5', 'bridges'):
        with pytest.raises(ValueError):
            side.parse_setup(bad)


def test_the_plugin_at_half_the_wall_clock_runs_as_gazebo_launch_would(tmp_path):
    """-z for the world's 1 ms step, as gazebo.launch.py's real_time_factor:=0.5."""
    world = tmp_path / 'plugin.sdf'
    world.write_text(iris_worlds.plugin_world(
        '<sdf><model name="m"><plugin filename="ArduPilotPlugin" name="a">'
        '<fdm_port_in>9002</fdm_port_in></plugin></model></sdf>', INSTANCE))
    assert side.plugin_command(str(world), 1.0) == ['gz', 'sim', '-s', '-r', str(world)]
    half = ['gz', 'sim', '-r', '-s', '-z', '500', str(world)]
    assert side.plugin_command(str(world), 0.5) == half


def flown(setup: str, error: float, cpu_per_sim: float, pace: float) -> side.Round:
    return side.Round(setup, ok=True, hover_error=error, sim_seconds=60.0,
                      wall_seconds=60.0 / pace, cpu={'gazebo': cpu_per_sim * 60.0})


def test_the_verdict_is_like_for_like_or_says_not():
    """A bridge that did not fly at the plugin's pace misses; different paces are named."""
    by_setup = {'plugin': [flown('plugin', 0.046, 0.569, 0.992)],
                'bridge': [side.Round('bridge', why='armed False')],
                'bridge:0.5': [flown('bridge:0.5', 0.035, 2.218, 0.499)]}
    missed, unlike = side.verdict(by_setup)
    assert missed == 'bridge: goal missed (it did not fly at the pace of plugin)'
    assert unlike.startswith('bridge:0.5 against plugin: hover error 0.035 m')
    assert unlike.endswith("(NOT like for like: real-time factor 0.50 against plugin's 0.99)")
    by_setup['plugin:0.5'] = [flown('plugin:0.5', 0.040, 0.6, 0.499)]
    line = side.verdict(by_setup)[1]
    assert line.startswith('bridge:0.5 against plugin:0.5') and 'like for like' not in line


def test_no_rounds_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, 'argv', ['gazebo_side_by_side.py', '--rounds', '0'])
    assert side.main() == 1
    assert capsys.readouterr().out == '--rounds must be at least 1 and --setups name one ' \
        'setup or more\n'
