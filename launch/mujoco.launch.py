"""
MuJoCo quad X simulators and their bridges: ros2 launch ardupilot_json_bridge mujoco.launch.py.

The Gazebo quick start that runs anywhere: vehicle k (k = first_instance ...) is a mujoco_sim
and a bridge in namespace <namespace_prefix><k>, serving SITL instance k on UDP 9002 + 10 k
(sim_vehicle.py -v ArduCopter -f quad --model JSON:127.0.0.1 -I k
--add-param-file=<share>/config/quad_x.parm: copter.parm alone mixes for a PLUS). One
vehicle runs on /clock; in a fleet each vehicle is a simulation of its own, on
/<namespace>/clock. sim_control:=simulation_interfaces starts each simulator paused and has
its bridge step it to each SITL frame (lock-step through ROS, docs/lockstep.md).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from ardupilot_json_bridge.config import SIM_CONTROL_NONE, SIMULATION_INTERFACES
from ardupilot_json_bridge.ros.launch_config import (
    bridge_node_arguments, clock_remappings, clock_topic, fleet, LaunchArgumentError,
    parse_bool, parse_rate, parse_real_time_factor, simulator_node_arguments)


def _vehicles(context, *args, **kwargs):
    def argument(name):
        return LaunchConfiguration(name).perform(context)

    use_sim_time = parse_bool('use_sim_time', argument('use_sim_time'))
    imu_rate = parse_rate('imu_rate', argument('imu_rate'))
    odom_rate = parse_rate('odom_rate', argument('odom_rate'))
    real_time_factor = parse_real_time_factor('real_time_factor', argument('real_time_factor'))
    vehicles = fleet(argument('count'), argument('namespace_prefix'),
                     argument('first_instance'))
    lock_step = parse_sim_control(argument('sim_control'))
    nodes = []
    for vehicle in vehicles:
        clock = clock_topic(vehicle, len(vehicles))
        bridge = bridge_node_arguments(vehicle, use_sim_time, argument('params_file'))
        bridge['remappings'] = clock_remappings(clock)
        simulator = simulator_node_arguments(vehicle, clock, imu_rate, odom_rate,
                                             real_time_factor, argument('params_file'))
        if lock_step:
            simulator['parameters'][0]['paused'] = True
            bridge['parameters'].append({'sim_control': SIMULATION_INTERFACES,
                                         'sim_control_service': 'mujoco_sim'})
        nodes += [Node(**simulator), Node(**bridge)]
    return nodes


def parse_sim_control(value: str) -> bool:
    """Return whether the bridges step their simulators (sim_control:=simulation_interfaces)."""
    if value not in (SIM_CONTROL_NONE, SIMULATION_INTERFACES):
        raise LaunchArgumentError(f'sim_control: {value!r} is not {SIM_CONTROL_NONE} or '
                                  f'{SIMULATION_INTERFACES}')
    return value == SIMULATION_INTERFACES


def generate_launch_description() -> LaunchDescription:
    preset = os.path.join(get_package_share_directory('ardupilot_json_bridge'), 'config',
                          'mujoco_quad_x.yaml')
    return LaunchDescription([
        DeclareLaunchArgument('count', default_value='1', description='Number of vehicles'),
        DeclareLaunchArgument('namespace_prefix', default_value='quad',
                              description='Namespaces are <prefix><instance>'),
        DeclareLaunchArgument('first_instance', default_value='0',
                              description='SITL instance of the first vehicle'),
        DeclareLaunchArgument('params_file', default_value=preset,
                              description='Bridge parameters shared by all vehicles; the '
                                          'simulators take their commands as it says'),
        DeclareLaunchArgument('use_sim_time', default_value='true',
                              description="Bridges use the simulator's clock"),
        DeclareLaunchArgument('imu_rate', default_value='1000.0',
                              description='Physics and IMU rate of each simulator, Hz'),
        DeclareLaunchArgument('odom_rate', default_value='250.0',
                              description='Odometry rate of each simulator, Hz'),
        DeclareLaunchArgument('real_time_factor', default_value='1.0',
                              description='Simulated seconds a wall second, at most 1 '
                                          '(0.5 for a busy or small machine)'),
        DeclareLaunchArgument('sim_control', default_value=SIM_CONTROL_NONE,
                              description='none: the simulators run free; '
                                          'simulation_interfaces: each starts paused and its '
                                          'bridge steps it to each SITL frame (lock-step)'),
        OpaqueFunction(function=_vehicles),
    ])
