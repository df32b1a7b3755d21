"""One bridge: ros2 launch ardupilot_json_bridge bridge.launch.py namespace:=uav0 instance:=0."""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from ardupilot_json_bridge.ros.launch_config import (
    bridge_node_arguments, parse_bool, single_vehicle)


def _bridge(context, *args, **kwargs):
    vehicle = single_vehicle(LaunchConfiguration('namespace').perform(context),
                             LaunchConfiguration('instance').perform(context))
    use_sim_time = parse_bool('use_sim_time',
                              LaunchConfiguration('use_sim_time').perform(context))
    params_file = LaunchConfiguration('params_file').perform(context)
    return [Node(**bridge_node_arguments(vehicle, use_sim_time, params_file))]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument('namespace', default_value='',
                              description="Namespace of the vehicle's topics"),
        DeclareLaunchArgument('instance', default_value='0',
                              description='SITL instance (-I N): UDP port 9002 + 10 N'),
        DeclareLaunchArgument('params_file', default_value='',
                              description='ros__parameters YAML, e.g. a preset in config/'),
        DeclareLaunchArgument('use_sim_time', default_value='true',
                              description="Use the simulator's /clock"),
        OpaqueFunction(function=_bridge),
    ])
