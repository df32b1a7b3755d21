"""
Gazebo Harmonic, ros_gz_bridge and the bridge for the example quad X.

ros2 launch ardupilot_json_bridge gazebo.launch.py, then
sim_vehicle.py -v ArduCopter -f quad --model JSON:127.0.0.1 \
    --add-param-file=<share>/config/quad_x.parm
(instance 0; <share> is `ros2 pkg prefix ardupilot_json_bridge`/share/ardupilot_json_bridge;
quad_x.parm makes SITL mix for the quad X, not copter.parm's PLUS). server_only:=true runs
Gazebo without its GUI (needed where there is no display: the GUI aborts and takes the server
down); real_time_factor:=0.5 paces the world at half the wall clock (a small or busy machine).
sim_control:=gz_control_world starts Gazebo paused, bridges the world's ControlWorld service and
has the bridge step the world to each SITL frame (lock-step through ROS, docs/lockstep.md; give
SITL a large --speedup, e.g. 100).
ros_gz_sim is found when the launch runs, so the description loads (--show-args,
--print-description) without ros_gz, and a missing ros_gz is one launch error.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.conditions import IfCondition
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, PythonExpression
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from ardupilot_json_bridge.config import GZ_CONTROL_WORLD
from ardupilot_json_bridge.ros.launch_config import (
    bridge_node_arguments, control_service, gazebo_arguments, parse_bool,
    parse_gazebo_sim_control, REAL_TIME_FACTOR_HELP, SERVER_ONLY_HELP, single_vehicle)


def _gazebo(context, *args, **kwargs) -> list:
    """
    ros_gz_sim's gz_sim.launch.py with the world, server-only or not, at its pace.

    In lock-step also ros_gz_bridge, which then bridges the world's ControlWorld service too
    (a command-line argument: ros_gz 1.0's YAML configuration takes topics only), and the
    bridge stepping the world through it; Gazebo starts paused.
    """
    def argument(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    world = argument('world')
    lock_step = parse_gazebo_sim_control(
        LaunchConfiguration('sim_control', default='none').perform(context))
    gz_args = gazebo_arguments(world, parse_bool('server_only', argument('server_only')),
                               argument('real_time_factor'), lock_step)
    gazebo = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(PathJoinSubstitution(
            [FindPackageShare('ros_gz_sim'), 'launch', 'gz_sim.launch.py'])),
        launch_arguments={'gz_args': gz_args}.items())
    if not lock_step:
        return [gazebo]
    service = control_service(world)   # reads the world's SDF for its name
    topics = Node(package='ros_gz_bridge', executable='parameter_bridge', output='screen',
                  arguments=[f'{service}@ros_gz_interfaces/srv/ControlWorld'],
                  parameters=[{'config_file': argument('bridge_config'), 'use_sim_time': True}])
    bridge = bridge_node_arguments(single_vehicle('quad', argument('instance')), True,
                                   argument('params_file'))
    bridge['parameters'].append({'sim_control': GZ_CONTROL_WORLD,
                                 'sim_control_service': service})
    return [gazebo, topics, Node(**bridge)]


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory('ardupilot_json_bridge')
    config = os.path.join(share, 'config')
    # Running free (the default): these two; in lock-step _gazebo starts them configured for it.
    free = IfCondition(PythonExpression(
        ["'", LaunchConfiguration('sim_control'), "' == 'none'"]))
    topics = Node(package='ros_gz_bridge', executable='parameter_bridge', output='screen',
                  parameters=[{'config_file': LaunchConfiguration('bridge_config'),
                               'use_sim_time': True}], condition=free)
    bridge = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(share, 'launch', 'bridge.launch.py')),
        launch_arguments={'namespace': 'quad', 'instance': LaunchConfiguration('instance'),
                          'params_file': LaunchConfiguration('params_file'),
                          'use_sim_time': 'true'}.items(), condition=free)
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
                              description=SERVER_ONLY_HELP),
        DeclareLaunchArgument('real_time_factor', default_value='',
                              description=REAL_TIME_FACTOR_HELP),
        DeclareLaunchArgument('sim_control', default_value='none',
                              description='none: Gazebo runs free; gz_control_world: Gazebo '
                                          'starts paused and the bridge steps it to each SITL '
                                          "frame through the world's ControlWorld (lock-step)"),
        OpaqueFunction(function=_gazebo), topics, bridge,
    ])
