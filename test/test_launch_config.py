"""Launch arguments to node configurations (the logic of the launch files)."""

import ast
import os

import pytest

from ardupilot_json_bridge.ros.launch_config import (
    bridge_node_arguments, bridge_parameters, clock_remappings, clock_topic, fleet,
    LaunchArgumentError, parse_bool, parse_rate, parse_real_time_factor,
    simulator_node_arguments, single_vehicle, VehicleLaunch)

LAUNCH_DIR = os.path.join(os.path.dirname(__file__), '..', 'launch')


@pytest.mark.parametrize('count,prefix,first,expected', [
    ('1', 'uav', '0', [('uav0', 0, 9002)]),
    ('3', 'vehicle', '0', [('vehicle0', 0, 9002), ('vehicle1', 1, 9012),
                           ('vehicle2', 2, 9022)]),
    ('2', '/fleet/uav/', '5', [('fleet/uav5', 5, 9052), ('fleet/uav6', 6, 9062)]),
])
def test_fleet_derives_namespaces_instances_ports(count, prefix, first, expected):
    vehicles = fleet(count, prefix, first)
    assert [(v.namespace, v.instance, v.port) for v in vehicles] == expected


@pytest.mark.parametrize('count,prefix,first,message', [
    ('0', 'uav', '0', 'count: 0 is outside 1..64'),
    ('two', 'uav', '0', 'count: expected a whole number'),
    ('2', '', '0', 'namespace_prefix: vehicles need a namespace prefix'),
    ('2', '9uav', '0', 'is not a valid ROS namespace'),
    ('2', 'uav', '-1', 'first_instance'),
])
def test_fleet_refuses_bad_arguments(count, prefix, first, message):
    with pytest.raises(LaunchArgumentError, match=message):
        fleet(count, prefix, first)


def test_single_vehicle():
    assert single_vehicle('', '0') == VehicleLaunch('', 0)
    assert single_vehicle('/uav1', '1').port == 9012
    with pytest.raises(LaunchArgumentError, match='instance'):
        single_vehicle('uav', 'x')


@pytest.mark.parametrize('text,value', [('true', True), ('False', False), ('1', True),
                                        ('off', False)])
def test_parse_bool(text, value):
    assert parse_bool('use_sim_time', text) is value


def test_parse_bool_refuses():
    with pytest.raises(LaunchArgumentError, match='use_sim_time'):
        parse_bool('use_sim_time', 'maybe')


def test_parameters_put_launch_arguments_over_the_file():
    assert bridge_parameters(2, True, '/p.yaml') == ['/p.yaml', {'instance': 2,
                                                                 'use_sim_time': True}]
    assert bridge_parameters(0, False, '') == [{'instance': 0, 'use_sim_time': False}]


def test_node_arguments_name_the_package_executable_and_namespace():
    arguments = bridge_node_arguments(VehicleLaunch('uav3', 3), True, '/p.yaml')
    assert arguments == {'package': 'ardupilot_json_bridge', 'executable': 'bridge',
                         'name': 'json_sitl_bridge', 'namespace': 'uav3', 'output': 'screen',
                         'parameters': ['/p.yaml', {'instance': 3, 'use_sim_time': True}]}


@pytest.mark.parametrize('name,arguments', [
    ('bridge.launch.py', {'namespace', 'instance', 'params_file', 'use_sim_time'}),
    ('fleet.launch.py', {'count', 'namespace_prefix', 'first_instance', 'params_file',
                         'use_sim_time'}),
    ('gazebo.launch.py', {'world', 'bridge_config', 'params_file', 'instance'}),
    ('mujoco.launch.py', {'count', 'namespace_prefix', 'first_instance', 'params_file',
                          'use_sim_time', 'imu_rate', 'odom_rate', 'real_time_factor',
                          'sim_control'}),
])
def test_launch_files_declare_their_arguments(name, arguments):
    with open(os.path.join(LAUNCH_DIR, name)) as source:
        tree = ast.parse(source.read())
    declared = {call.args[0].value for call in ast.walk(tree)
                if isinstance(call, ast.Call) and getattr(call.func, 'id', '') ==
                'DeclareLaunchArgument'}
    assert declared == arguments


def test_rates_are_positive_hertz():
    assert parse_rate('imu_rate', '250') == 250.0
    for text, message in [('fast', 'imu_rate: expected a rate in Hz'),
                          ('0', 'imu_rate: 0 Hz is outside'), ('-5', 'outside')]:
        with pytest.raises(LaunchArgumentError, match=message):
            parse_rate('imu_rate', text)


@pytest.mark.parametrize('text,message', [
    ('slow', "real_time_factor: expected a real-time factor, got 'slow'"),
    ('0', 'real_time_factor: 0 is not above 0 and at most 1'), ('-0.5', 'not above 0'),
    ('1.5', "1.5 is not above 0 and at most 1 .*SITL's --speedup")])
def test_a_real_time_factor_is_above_0_and_at_most_1(text, message):
    with pytest.raises(LaunchArgumentError, match=message):
        parse_real_time_factor('real_time_factor', text)


@pytest.mark.parametrize('text,value', [('0.5', 0.5), ('1', 1.0), ('0.01', 0.01)])
def test_real_time_factors_up_to_1_are_taken(text, value):
    assert parse_real_time_factor('real_time_factor', text) == value


def test_one_simulation_runs_on_clock_a_fleet_on_clocks_of_their_own():
    quad = VehicleLaunch('quad3', 3)
    assert clock_topic(quad, 1) == '/clock' and clock_remappings('/clock') == []
    assert clock_topic(quad, 2) == '/quad3/clock'
    assert simulator_node_arguments(quad, '/quad3/clock', 250.0, 125.0, 0.5) == {
        'package': 'ardupilot_json_bridge', 'executable': 'mujoco_sim', 'name': 'mujoco_sim',
        'namespace': 'quad3', 'output': 'screen',
        'parameters': [{'imu_rate': 250.0, 'odom_rate': 125.0, 'real_time_factor': 0.5}],
        'remappings': [('/clock', '/quad3/clock')]}
