"""
Gazebo Harmonic, ros_gz_bridge and the bridge for the example quad X.

ros2 launch ardupilot_json_bridge gazebo.launch.py, then
sim_vehicle.py -v ArduCopter -f quad --model JSON:127.0.0.1 \
    --add-param-file=<share>/config/quad_x.parm
(instance 0; <share> is `ros2 pkg prefix ardupilot_json_bridge`/share/ardupilot_json_bridge;
quad_x.parm makes SITL mix for the quad X, not copter.parm's PLUS). ros_gz_sim is found when
the launch runs, so the description loads (--show-args, --print-description) without ros_gz,
and a missing ros_gz is one launch error.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory('ardupilot_json_bridge')
    config = os.path.join(share, 'config')
    gazebo = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(PathJoinSubstitution(
            [FindPackageShare('ros_gz_sim'), 'launch', 'gz_sim.launch.py'])),
        launch_arguments={'gz_args': ['-r ', LaunchConfiguration('world')]}.items())
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
        gazebo, topics, bridge,
    ])
