"""
A set on every parameter of both nodes, as `ros2 param set` makes it (rclpy's set_parameters).

A start-up-only parameter is refused as read-only; a live one is applied; the node lives on.
"""

import time
from typing import Any, Dict

import pytest

rclpy = pytest.importorskip('rclpy', reason='needs ROS 2 (rclpy): source ROS or pip install '
                                            "'.[jazzy]'")

from rclpy.parameter import Parameter  # noqa: E402, I100, I202

from ardupilot_json_bridge.config import PARAMETERS  # noqa: E402
from ardupilot_json_bridge.ros.node import JsonSitlBridge, LIVE_SETTINGS  # noqa: E402
from conftest import free_udp_port  # noqa: E402

# What the bridge's live settings may be set to, in range and unlike their defaults.
LIVE_VALUES = {'fresh_timeout': 0.3, 'peer_timeout': 3.0, 'max_odometry_lag': 0.1,
               'max_optional_age': 2.0, 'max_backlog': 0.5, 'horizon': 0.01}
# rclpy's own settable parameter, which it applies itself (Jazzy's other, the type
# description service's, is read-only).
ROS_OWN = {'use_sim_time'}


@pytest.fixture(scope='module', autouse=True)
def ros():
    rclpy.init()
    yield
    rclpy.shutdown()


def set_each(node: Any, values: Dict[str, Any]) -> Dict[str, Any]:
    """Set each of the node's parameters alone; return each one's SetParametersResult."""
    results = {}
    for name in node._parameters:
        value = values.get(name, node.get_parameter(name).value)
        results[name] = node.set_parameters([Parameter(name, value=value)])[0]
    return results


def test_the_bridge_refuses_start_up_parameters_and_applies_live_ones():
    node = JsonSitlBridge(parameter_overrides=[
        Parameter('port', value=free_udp_port()),
        Parameter('output_groups', value=['m']),
        Parameter('outputs.m.type', value='float64_multi_array'),
        Parameter('outputs.m.channels', value=[1, 2])])
    try:
        assert set(LIVE_VALUES) == set(LIVE_SETTINGS)
        results = set_each(node, {**LIVE_VALUES, 'use_sim_time': True})
        assert {spec.name for spec in PARAMETERS} <= set(results)
        for name, result in results.items():
            if name in LIVE_SETTINGS or name in ROS_OWN:
                assert result.successful, (name, result.reason)
            else:
                assert not result.successful and 'read-only' in result.reason, name
        assert node.get_parameter('use_sim_time').value is True
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and node.link.applied[1].horizon != 0.01:
            time.sleep(0.02)
        link, state, _ = node.link.applied
        assert (link.fresh_timeout, link.peer_timeout) == (0.3, 3.0)
        assert (state.max_odometry_lag, state.max_optional_age, state.max_backlog,
                state.horizon) == (0.1, 2.0, 0.5, 0.01)
        assert node.link.process.poll() is None
    finally:
        node.destroy_node()


def test_the_simulator_refuses_start_up_parameters_and_lives_through_a_set():
    pytest.importorskip('mujoco', reason='needs the mujoco package')
    from ardupilot_json_bridge.ros.mujoco_sim import MujocoSim
    node = MujocoSim(parameter_overrides=[Parameter('imu_rate', value=250)])
    try:
        results = set_each(node, {'use_sim_time': True, 'imu_rate': 500.0})
        assert {'vehicle', 'model', 'preset', 'imu_rate', 'odom_rate', 'real_time_factor',
                'command_type', 'frame_id', 'child_frame_id', 'vehicles', 'namespace_prefix',
                'wind', 'gust'} <= set(results)
        for name, result in results.items():
            if name in ROS_OWN:
                assert result.successful, (name, result.reason)
            else:
                assert not result.successful and 'read-only' in result.reason, name
        assert node.rate == 250.0
        # Physics goes on after the sets.
        before = node.vehicle.time
        time.sleep(0.3)
        assert node.vehicle.time > before and node._thread.is_alive()
    finally:
        node.destroy_node()
