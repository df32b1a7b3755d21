"""
Gazebo Harmonic, ros_gz_bridge and the bridge for the example quad X.

ros2 launch ardupilot_json_bridge gazebo.launch.py, then
sim_vehicle.py -v ArduCopter -f quad --model JSON:127.0.0.1 \
    --add-param-file=<share>/config/quad_x.parm
(instance 0; <share> is `ros2 pkg prefix ardupilot_json_bridge`/share/ardupilot_json_bridge;
quad_x.parm makes SITL mix for the quad X, not copter.parm's PLUS). server_only:=true runs
Gazebo without its GUI (needed where there is no display: the GUI aborts and takes the server
down); real_time_factor:=0.5 paces the world at half the wall clock (a small or busy machine).
ros_gz_sim is found when the launch runs, so the description loads (--show-args,
--print-description) without ros_gz, and a missing ros_gz is one launch error.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from ardupilot_json_bridge.ros.launch_config import gazebo_arguments, parse_bool


def _gazebo(context, *args, **kwargs) -> list:
    """ros_gz_sim's gz_sim.launch.py with the world, server-only or not, at its pace."""
    def argument(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    gz_args = gazebo_arguments(argument('world'), parse_bool('server_only',
                                                             argument('server_only')),
                               argument('real_time_factor'))
    return [IncludeLaunchDescription(
        PythonLaunchDescriptionSource(PathJoinSubstitution(
            [FindPackageShare('ros_gz_sim'), 'launch', 'gz_sim.launch.py'])),
        launch_arguments={'gz_args': gz_args}.items())]


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory('ardupilot_json_bridge')
    config = os.path.join(share, 'config')
    topics = Node(package='ros_gz_bridge', executable='parameter_bridge', output='screen',
                  parameters=[{'config_file': LaunchConfiguration('bridge_config'),
                               'use_sim_time': True}])
    bridge = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(share, 'launch', 'bridge.launch.py')),
        launch_arguments={'namespace': 'quad', 'instance': LaunchConfiguration('instance'),
                          'params_file': LaunchConfiguration('params_file'),
                          'use_sim_time': 'true'}.items())
    return LaunchDescription([
        DeclareLaunchArgument('world',
                              default_value=os.path.join(config, 'worlds', 'quad_x.sdf'),
                              description='SDF world with the vehicle'),
        DeclareLaunchArgument('bridge_config',
                              default_value=os.path.join(config, 'gz_bridge_quad.yaml'),
                              description='ros_gz_bridge topic configuration'),
        DeclareLaunchArgument('params_file', default_value=os.path.join(config, 'quad_x.yaml'),
                              description='Bridge parameters'),
        DeclareLaunchArgument('instance', default_value='0', description='SITL instance'),
        DeclareLaunchArgument('server_only', default_value='false',
                              description='Gazebo without its GUI (true where there is no '
                                          'display)'),
        DeclareLaunchArgument('real_time_factor', default_value='',
                              description='Simulated seconds a wall second, at most 1 (empty: '
                                          "the world's own; 0.5 for a busy or small machine)"),
        OpaqueFunction(function=_gazebo), topics, bridge,
    ])
