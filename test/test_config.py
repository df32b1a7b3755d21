"""Parameters to configuration: defaults, validation messages, YAML files and presets."""

import os

import pytest

from ardupilot_json_bridge.config import (
    config_from_parameters, ConfigError, flatten, load_parameters_file, PARAMETERS,
    shipped_preset)
from ardupilot_json_bridge.core.pwm import ActuatorField, OutputKind
from ardupilot_json_bridge.sources.replay import resolve_topic

CONFIG_DIR = os.path.join(os.path.dirname(__file__), '..', 'config')
PRESETS = ['quad_x.yaml', 'plane.yaml', 'rover.yaml']


def test_defaults():
    config = config_from_parameters({})
    assert config.link.listen_port == 9002
    assert config.link.bind_address == '127.0.0.1'
    assert config.inputs.odom_topic == 'odom' and config.inputs.imu_topic == 'imu'
    assert config.outputs == ()
    assert not config.link.no_time_sync


def test_every_parameter_has_a_description_and_valid_default():
    names = [spec.name for spec in PARAMETERS]
    assert len(names) == len(set(names))
    for spec in PARAMETERS:
        assert spec.description
        config_from_parameters({spec.name: spec.default})


@pytest.mark.parametrize('parameters,message', [
    ({'instance': -1}, 'instance: -1 is below the minimum 0'),
    ({'instance': 1.5}, 'instance: expected a whole number'),
    # 9002 + 10 x 5654 = 65542: past the last UDP port, so past the declared range.
    ({'instance': 5654}, 'instance: 5654 is above the maximum 5653'),
    ({'port': 70000}, 'port: 70000 is above the maximum 65535'),
    ({'fresh_timeout': 'soon'}, 'fresh_timeout: expected a number'),
    # A fleet's world holding a frame 1.1 s would answer it after SITL resent it.
    ({'hold_timeout': 1.1}, 'hold_timeout: 1.1 is above the maximum 1'),
    ({'odometry_only': 1}, 'odometry_only: expected true or false'),
    ({'imu_mounting_rpy': [0.0, 0.0]}, 'imu_mounting_rpy: expected [roll, pitch, yaw]'),
    ({'odom_twist_frame': 'body'}, "odom_twist_frame: 'body' is not one of child, world"),
    ({'rangefinder_2_topic': 'scan'}, 'rangefinder_2_topic: set rangefinder_1_topic first'),
    ({'rangefinder_1_topic': 'r', 'rangefinder_1_type': 'sonar'}, 'rangefinder_1_type'),
    ({'imu_tpoic': 'imu'}, 'imu_tpoic: unknown parameter'),
    ({'output_groups': ['m']}, 'outputs.m.type'),
    ({'output_groups': ['m'], 'outputs.m.type': 'actuators'}, 'outputs.m.channels'),
    ({'output_groups': ['m'], 'outputs.m.type': 'actuators', 'outputs.m.channels': [33]},
     'SERVO33 does not exist'),
    ({'output_groups': ['m'], 'outputs.m.type': 'actuators', 'outputs.m.channels': [1, 2],
      'outputs.m.multiplier': [1.0]}, 'outputs.m.multiplier: 1 values for 2 channels'),
    ({'output_groups': ['m'], 'outputs.m.type': 'actuators', 'outputs.m.channels': [1],
      'outputs.m.servo_min': 2000, 'outputs.m.servo_max': 1000}, 'is not above servo_min'),
    ({'output_groups': ['m'], 'outputs.m.type': 'float64', 'outputs.m.channels': [1, 2],
      'outputs.m.topics': ['a']}, 'outputs.m.topics: 1 topics for 2 channels'),
    ({'output_groups': ['m'], 'outputs.m.type': 'actuators', 'outputs.m.channels': [1],
      'outputs.m.field': 'effort'}, 'outputs.m.field'),
    ({'output_groups': ['m'], 'outputs.m.type': 'actuators', 'outputs.m.channels': [1],
      'outputs.m.chanels': [1]}, 'outputs.m.chanels: unknown setting'),
    ({'outputs.x.type': 'float64'}, "group 'x' is not listed in output_groups"),
    ({'output_groups': ['m', 'm']}, 'names repeat'),
    ({'imu_topic': '', 'odometry_only': False}, 'imu_topic: empty'),
])
def test_bad_settings_are_named(parameters, message):
    with pytest.raises(ConfigError) as error:
        config_from_parameters(parameters)
    assert message in str(error.value)


def test_ros_extras_are_ignored():
    config_from_parameters({'use_sim_time': True, 'qos_overrides./odom.subscription.depth': 5})


def test_absolute_topics_are_taken_as_given():
    # ros_gz worlds publish absolute topics; ROS remaps absolute names as it does relative ones.
    config = config_from_parameters({
        'odom_topic': '/model/quad/odometry', 'imu_topic': '/world/w/imu',
        'output_groups': ['m'], 'outputs.m.type': 'actuators', 'outputs.m.channels': [1],
        'outputs.m.topic': '/quad/command/motor_speed'})
    assert config.inputs.odom_topic == '/model/quad/odometry'
    assert config.inputs.imu_topic == '/world/w/imu'
    assert config.outputs[0].topic == '/quad/command/motor_speed'


@pytest.mark.parametrize('namespace, topic, resolved', [
    ('quad0', 'odom', '/quad0/odom'), ('', 'odom', '/odom'),
    ('quad0', '/model/quad/odometry', '/model/quad/odometry')])
def test_a_topic_resolves_under_a_namespace_as_ros_resolves_it(namespace, topic, resolved):
    assert resolve_topic(namespace, topic) == resolved


def test_instance_sets_port():
    assert config_from_parameters({'instance': 3}).link.listen_port == 9032
    assert config_from_parameters({'instance': 3, 'port': 14000}).link.listen_port == 14000


def test_flatten_nests_with_dots():
    nested = {'a': 1, 'outputs': {'m': {'type': 'x'}}}
    assert flatten(nested) == {'a': 1, 'outputs.m.type': 'x'}


@pytest.mark.parametrize('preset', PRESETS)
def test_presets_load_and_validate(preset):
    config = config_from_parameters(load_parameters_file(os.path.join(CONFIG_DIR, preset)))
    assert config.outputs


def test_quad_x_preset_drives_multicopter_motor_model():
    config = config_from_parameters(load_parameters_file(os.path.join(CONFIG_DIR,
                                                                      'quad_x.yaml')))
    (motors,) = config.outputs
    assert motors.kind is OutputKind.ACTUATORS and motors.field is ActuatorField.VELOCITY
    assert motors.channels == (1, 2, 3, 4) and motors.topic == 'command/motor_speed'
    assert motors.scalings[0].command(1900) == pytest.approx(838.0)


def test_rover_preset_matches_joint_counts():
    config = config_from_parameters(load_parameters_file(os.path.join(CONFIG_DIR,
                                                                      'rover.yaml')))
    groups = {g.name: g for g in config.outputs}
    assert groups['wheels'].kind is OutputKind.FLOAT64_MULTI_ARRAY
    assert len(groups['wheels'].channels) == 4 and len(groups['steering'].channels) == 2
    assert groups['wheels'].scalings[0].command(1500) == pytest.approx(0.0)


def test_parameters_file_sections(tmp_path):
    path = tmp_path / 'params.yaml'
    path.write_text('/**:\n  ros__parameters:\n    instance: 1\n    imu_topic: a\n'
                    'json_sitl_bridge:\n  ros__parameters:\n    imu_topic: b\n'
                    '/uav2/json_sitl_bridge:\n  ros__parameters:\n    odom_topic: c\n')
    assert load_parameters_file(str(path)) == {'instance': 1, 'imu_topic': 'b'}
    assert load_parameters_file(str(path), namespace='uav2') == {
        'instance': 1, 'imu_topic': 'b', 'odom_topic': 'c'}
    other = tmp_path / 'other.yaml'
    other.write_text('some_node:\n  ros__parameters:\n    x: 1\n')
    with pytest.raises(ConfigError, match='no ros__parameters for node /json_sitl_bridge'):
        load_parameters_file(str(other))


def test_a_shipped_preset_is_found_under_a_sourced_colcon_install(tmp_path, monkeypatch):
    # A colcon install puts config/ under <prefix>/share/<package>/, outside sys.prefix: the
    # MuJoCo simulator launched by ros2 launch once said 'the shipped preset was not found'.
    folder = tmp_path / 'share' / 'ardupilot_json_bridge' / 'config'
    folder.mkdir(parents=True)
    (folder / 'only_installed.yaml').write_text('{}\n')
    assert shipped_preset('only_installed.yaml') is None
    monkeypatch.setenv('AMENT_PREFIX_PATH', os.pathsep.join(['/nonexistent', str(tmp_path)]))
    assert shipped_preset('only_installed.yaml') == str(folder / 'only_installed.yaml')
