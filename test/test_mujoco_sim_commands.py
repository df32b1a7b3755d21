"""mujoco_sim takes its commands as the bridge's parameters file says (mujoco.launch.py)."""

import os

import pytest

rclpy = pytest.importorskip('rclpy', reason='needs ROS 2 (rclpy): source ROS or pip install '
                                            "'.[jazzy]'")
pytest.importorskip('mujoco', reason='needs the mujoco package')

from rclpy.parameter import Parameter  # noqa: E402, I100, I202
from std_msgs.msg import Float64MultiArray  # noqa: E402

from ardupilot_json_bridge.ros.mujoco_sim import MujocoSim  # noqa: E402

CONFIG = os.path.join(os.path.dirname(__file__), '..', 'config')


@pytest.fixture(scope='module', autouse=True)
def ros():
    rclpy.init()
    yield
    rclpy.shutdown()


def simulator(namespace: str = '', **parameters) -> MujocoSim:
    return MujocoSim(namespace=namespace, parameter_overrides=[
        Parameter(name, value=value) for name, value in parameters.items()])


def subscribed(node: MujocoSim) -> dict:
    return {s.topic_name: s.msg_type for s in node.subscriptions}


def preset_file(tmp_path, section: str, topic: str) -> str:
    path = tmp_path / 'preset.yaml'
    path.write_text(f'{section}:\n  ros__parameters:\n    output_groups: [motors]\n'
                    '    outputs:\n      motors:\n        type: float64_multi_array\n'
                    f'        topic: {topic}\n        channels: [1, 2, 3, 4]\n')
    return str(path)


def test_the_gazebo_preset_makes_the_simulator_take_actuators_or_refuse_in_one_line():
    preset = os.path.join(CONFIG, 'quad_x.yaml')
    try:
        from actuator_msgs.msg import Actuators
    except ImportError:
        with pytest.raises(ValueError) as error:
            simulator(preset=preset)
        assert str(error.value) == ('preset: output group motors takes actuator_msgs/'
                                    'Actuators, but actuator_msgs is not installed')
        return
    node = simulator(preset=preset)
    try:
        assert subscribed(node)['/command/motor_speed'] is Actuators
    finally:
        node.destroy_node()


def test_a_preset_section_for_the_namespaced_bridge_applies_and_absolute_topics_stay(
        tmp_path):
    node = simulator('quad0', preset=preset_file(tmp_path, '/quad0/json_sitl_bridge',
                                                 '/model/quad/motors'))
    try:
        assert subscribed(node)['/model/quad/motors'] is Float64MultiArray
    finally:
        node.destroy_node()


def test_a_fleet_refuses_an_absolute_command_topic_all_would_share(tmp_path):
    with pytest.raises(ValueError) as error:
        simulator(vehicles=2, preset=preset_file(tmp_path, '/**', '/motors'))
    assert 'need relative command topics' in str(error.value)


def test_a_preset_that_is_no_file_is_one_line():
    with pytest.raises(ValueError) as error:
        simulator(preset='/nonexistent/quad.yaml')
    assert str(error.value).startswith('preset /nonexistent/quad.yaml: ')
