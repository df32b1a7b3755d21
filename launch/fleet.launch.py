"""
N bridges: ros2 launch ardupilot_json_bridge fleet.launch.py count:=3.

Vehicle k (k = first_instance ...) runs in namespace <namespace_prefix><k> and serves SITL
instance k on UDP 9002 + 10 k: start SITL with sim_vehicle.py -I k (for a quad X preset with
--add-param-file=<share>/config/quad_x.parm: copter.parm alone mixes for a PLUS).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from ardupilot_json_bridge.ros.launch_config import bridge_node_arguments, fleet, parse_bool


def _fleet(context, *args, **kwargs):
    def argument(name):
        return LaunchConfiguration(name).perform(context)

    use_sim_time = parse_bool('use_sim_time', argument('use_sim_time'))
    return [Node(**bridge_node_arguments(vehicle, use_sim_time, argument('params_file')))
            for vehicle in fleet(argument('count'), argument('namespace_prefix'),
                                 argument('first_instance'))]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument('count', default_value='2', description='Number of vehicles'),
        DeclareLaunchArgument('namespace_prefix', default_value='vehicle',
                              description='Namespaces are <prefix><instance>'),
        DeclareLaunchArgument('first_instance', default_value='0',
                              description='SITL instance of the first vehicle'),
        DeclareLaunchArgument('params_file', default_value='',
                              description='ros__parameters YAML shared by all vehicles'),
        DeclareLaunchArgument('use_sim_time', default_value='true',
                              description="Use the simulator's /clock"),
        OpaqueFunction(function=_fleet),
    ])
