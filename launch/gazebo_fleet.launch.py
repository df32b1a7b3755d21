"""
N quad X in one Gazebo Harmonic world: ros2 launch ardupilot_json_bridge gazebo_fleet.launch.py.

count:=2 (the default) copies config/worlds/quad_x.sdf's quad into one world, vehicle k
(k = first_instance ...) named <namespace_prefix><k>, 3 m north of the one before, with topics
of its own (/<ns>/imu, /<ns>/odometry, /<ns>/command/motor_speed); one ros_gz_bridge bridges
/clock and those to where params_file's bridges read and write them, and fleet.launch.py
starts a bridge node in each namespace serving SITL instance k: sim_vehicle.py -v ArduCopter
-f quad -I k --model JSON:127.0.0.1 --add-param-file=<share>/config/quad_x.parm. The world
and the bridge configuration are written to a temporary folder when the launch runs, removed
when it ends. Gazebo runs free (server_only, real_time_factor as in gazebo.launch.py); there
is no lock-step for a fleet (one world, several steppers).
"""

import os
import shutil
import tempfile

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import (
    DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction, RegisterEventHandler)
from launch.event_handlers import OnShutdown
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from ardupilot_json_bridge.ros.launch_config import (
    fleet, gazebo_arguments, parse_bool, REAL_TIME_FACTOR_HELP, SERVER_ONLY_HELP,
    write_gazebo_fleet)


def _gazebo(context, *args, **kwargs) -> list:
    """Gazebo with the fleet's world and one ros_gz_bridge for all of its vehicles."""
    def argument(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    # What needs no file is checked before the folder exists; an error after mkdtemp (world,
    # model, params_file, real_time_factor) removes it.
    vehicles = fleet(argument('count'), argument('namespace_prefix'), argument('first_instance'))
    server_only = parse_bool('server_only', argument('server_only'))
    folder = tempfile.mkdtemp(prefix='ardupilot_json_bridge_gazebo_fleet_')
    removal = RegisterEventHandler(OnShutdown(
        on_shutdown=lambda event, context: shutil.rmtree(folder, ignore_errors=True)))
    try:
        world, bridge_config = write_gazebo_fleet(
            argument('world'), argument('model'), [vehicle.namespace for vehicle in vehicles],
            argument('params_file'), folder)
        gz_args = gazebo_arguments(world, server_only, argument('real_time_factor'))
    except Exception:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    gazebo = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(PathJoinSubstitution(
            [FindPackageShare('ros_gz_sim'), 'launch', 'gz_sim.launch.py'])),
        launch_arguments={'gz_args': gz_args}.items())
    topics = Node(package='ros_gz_bridge', executable='parameter_bridge', output='screen',
                  parameters=[{'config_file': bridge_config, 'use_sim_time': True}])
    return [removal, gazebo, topics]


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory('ardupilot_json_bridge')
    config = os.path.join(share, 'config')
    bridges = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(share, 'launch', 'fleet.launch.py')),
        launch_arguments={'count': LaunchConfiguration('count'),
                          'namespace_prefix': LaunchConfiguration('namespace_prefix'),
                          'first_instance': LaunchConfiguration('first_instance'),
                          'params_file': LaunchConfiguration('params_file'),
                          'use_sim_time': 'true'}.items())
    return LaunchDescription([
        DeclareLaunchArgument('count', default_value='2', description='Number of vehicles'),
        DeclareLaunchArgument('namespace_prefix', default_value='vehicle',
                              description='Namespaces are <prefix><instance>, model names '
                                          'the same with / as _'),
        DeclareLaunchArgument('first_instance', default_value='0',
                              description='SITL instance of the first vehicle'),
        DeclareLaunchArgument('world',
                              default_value=os.path.join(config, 'worlds', 'quad_x.sdf'),
                              description='SDF world whose vehicle model is copied per vehicle'),
        DeclareLaunchArgument('model', default_value='quad',
                              description="The world's vehicle model, whose name scopes its "
                                          'topics'),
        DeclareLaunchArgument('params_file', default_value=os.path.join(config, 'quad_x.yaml'),
                              description='Bridge parameters shared by all vehicles; the '
                                          'ROS side of the bridged topics follows them'),
        DeclareLaunchArgument('server_only', default_value='false',
                              description=SERVER_ONLY_HELP),
        DeclareLaunchArgument('real_time_factor', default_value='',
                              description=REAL_TIME_FACTOR_HELP),
        OpaqueFunction(function=_gazebo), bridges,
    ])
