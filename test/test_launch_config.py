"""Launch arguments to node configurations (the logic of the launch files)."""

import ast
import os
import re

import pytest

from ardupilot_json_bridge.ros.launch_config import (
    bridge_node_arguments, bridge_parameters, clock_remappings, clock_topic, control_service,
    fleet, gazebo_arguments, LaunchArgumentError, parse_bool, parse_gazebo_sim_control,
    parse_rate, parse_real_time_factor, simulator_node_arguments, single_vehicle, VehicleLaunch,
    world_step)

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
    # The second vehicle would be instance 5654, on port 65542: past the last UDP port.
    ('2', 'uav', '5653', 'first_instance: 5653 is outside 0..5652'),
])
def test_fleet_refuses_bad_arguments(count, prefix, first, message):
    with pytest.raises(LaunchArgumentError, match=message):
        fleet(count, prefix, first)


def test_single_vehicle():
    assert single_vehicle('', '0') == VehicleLaunch('', 0)
    assert single_vehicle('/uav1', '1').port == 9012
    with pytest.raises(LaunchArgumentError, match='instance'):
        single_vehicle('uav', 'x')
    # 9002 + 10 x 5653 = 65532 is the last port an instance has.
    assert single_vehicle('uav', '5653').port == 65532
    with pytest.raises(LaunchArgumentError, match=r'instance: 5654 is outside 0\.\.5653'):
        single_vehicle('uav', '5654')


@pytest.mark.parametrize('text,value', [('true', True), ('False', False), ('1', True),
                                        ('off', False)])
def test_parse_bool(text, value):
    assert parse_bool('use_sim_time', text) is value


def test_parse_bool_refuses():
    with pytest.raises(LaunchArgumentError, match='use_sim_time'):
        parse_bool('use_sim_time', 'maybe')


@pytest.fixture
def params_file(tmp_path):
    path = tmp_path / 'p.yaml'
    path.write_text('json_sitl_bridge:\n  ros__parameters:\n    instance: 0\n')
    return str(path)


def test_parameters_put_launch_arguments_over_the_file(params_file):
    assert bridge_parameters(2, True, params_file) == [params_file, {'instance': 2,
                                                                     'use_sim_time': True}]
    assert bridge_parameters(0, False, '') == [{'instance': 0, 'use_sim_time': False}]


def test_node_arguments_name_the_package_executable_and_namespace(params_file):
    arguments = bridge_node_arguments(VehicleLaunch('uav3', 3), True, params_file)
    assert arguments == {'package': 'ardupilot_json_bridge', 'executable': 'bridge',
                         'name': 'json_sitl_bridge', 'namespace': 'uav3', 'output': 'screen',
                         'parameters': [params_file, {'instance': 3, 'use_sim_time': True}]}


def test_a_missing_params_file_is_a_launch_error(tmp_path):
    # launch_ros would only warn, and start a bridge with no outputs.
    missing = str(tmp_path / 'quad_x.yml')
    for start in (lambda: bridge_node_arguments(VehicleLaunch('uav0', 0), True, missing),
                  lambda: simulator_node_arguments(VehicleLaunch('uav0', 0), '/clock', 250.0,
                                                   125.0, 1.0, missing)):
        with pytest.raises(LaunchArgumentError) as error:
            start()
        assert str(error.value) == f'params_file: {missing!r} is not a file'


def test_the_simulator_takes_its_commands_as_the_bridges_params_file_says(params_file):
    arguments = simulator_node_arguments(VehicleLaunch('quad0', 0), '/clock', 250.0, 125.0,
                                         1.0, params_file)
    assert arguments['parameters'] == [{'imu_rate': 250.0, 'odom_rate': 125.0,
                                        'real_time_factor': 1.0, 'preset': params_file}]


LAUNCH_FILES = sorted(n for n in os.listdir(LAUNCH_DIR) if n.endswith('.launch.py'))


def string_arguments(tree: ast.AST, callee: str) -> set:
    """Return the string constants passed first to calls of callee (a name) in tree."""
    return {call.args[0].value for call in ast.walk(tree)
            if isinstance(call, ast.Call) and getattr(call.func, 'id', '') == callee
            and call.args and isinstance(call.args[0], ast.Constant)}


@pytest.mark.parametrize('name', LAUNCH_FILES)
def test_every_declared_launch_argument_is_used_and_every_used_one_declared(name):
    """An argument declared and never read would be accepted on the command line and ignored."""
    with open(os.path.join(LAUNCH_DIR, name)) as source:
        tree = ast.parse(source.read())
    declared = string_arguments(tree, 'DeclareLaunchArgument')
    # Read directly, or through the files' `argument(name)` shorthand for it.
    used = string_arguments(tree, 'LaunchConfiguration') | string_arguments(tree, 'argument')
    assert declared and declared == used, (sorted(declared - used), sorted(used - declared))


def readme_launch_arguments() -> dict:
    """Return {launch file: the name:= arguments the README's commands give it}."""
    with open(os.path.join(LAUNCH_DIR, '..', 'README.md')) as stream:
        text = stream.read().replace('\\\n', ' ')
    given = {}
    for line in text.splitlines():
        command = re.search(r'ros2 launch ardupilot_json_bridge (\S+\.launch\.py)(.*)', line)
        if command:
            given.setdefault(command.group(1), set()).update(
                re.findall(r'(\w+):=', command.group(2).split('#')[0]))
    return given


def test_the_readmes_launch_commands_give_only_declared_arguments():
    given = readme_launch_arguments()
    assert set(given) >= {'mujoco.launch.py', 'bridge.launch.py', 'fleet.launch.py'}
    for name, arguments in given.items():
        with open(os.path.join(LAUNCH_DIR, name)) as source:
            declared = string_arguments(ast.parse(source.read()), 'DeclareLaunchArgument')
        assert arguments <= declared, (name, sorted(arguments - declared))


def test_rates_are_positive_hertz():
    assert parse_rate('imu_rate', '250') == 250.0
    for text, message in [('fast', 'imu_rate: expected a rate in Hz'),
                          ('0', 'imu_rate: 0 is not above 0'), ('-5', 'not above 0'),
                          ('inf', 'imu_rate: expected a finite number')]:
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


def world_file(folder, physics: str) -> str:
    """Write an SDF world with the given <physics> content; its path."""
    path = folder / 'world.sdf'
    path.write_text(f'<sdf version="1.9"><world name="w"><physics name="p" type="ignored">'
                    f'{physics}</physics></world></sdf>')
    return str(path)


def test_gazebo_runs_the_world_with_or_without_its_gui_at_its_own_pace(tmp_path):
    world = world_file(tmp_path, '<max_step_size>0.001</max_step_size>')
    assert gazebo_arguments(world, False, '') == f'-r {world}'
    assert gazebo_arguments(world, True, '') == f'-r -s {world}'
    # A path with a space stays one argument for the shell ros_gz_sim runs gz sim in.
    assert gazebo_arguments('/my worlds/a.sdf', True, '') == "-r -s '/my worlds/a.sdf'"


@pytest.mark.parametrize('physics,factor,rate', [
    ('<max_step_size>0.001</max_step_size>', '0.5', '500'),   # 1 ms steps, half speed
    ('<max_step_size>0.004</max_step_size>', '1', '250'),
    ('', '0.25', '250'),                                      # SDF's default step, 1 ms
])
def test_a_real_time_factor_is_gazebos_update_rate_for_the_worlds_step(tmp_path, physics,
                                                                       factor, rate):
    world = world_file(tmp_path, physics)
    assert gazebo_arguments(world, True, factor) == f'-r -s -z {rate} {world}'


def test_the_project_world_steps_at_1_khz():
    world = os.path.join(os.path.dirname(__file__), '..', 'config', 'worlds', 'quad_x.sdf')
    assert world_step(world) == 0.001


@pytest.mark.parametrize('physics,factor,message', [
    ('<max_step_size>0</max_step_size>', '0.5', "world: <max_step_size> '0' is not above 0"),
    ('<max_step_size>soon</max_step_size>', '0.5', 'world: expected a <max_step_size>'),
    ('<max_step_size>0.001</max_step_size>', '2', 'real_time_factor: 2 is not above 0'),
])
def test_gazebo_arguments_refuse_what_cannot_run(tmp_path, physics, factor, message):
    with pytest.raises(LaunchArgumentError, match=message):
        gazebo_arguments(world_file(tmp_path, physics), True, factor)


def test_a_real_time_factor_needs_a_world_file_to_read(tmp_path):
    with pytest.raises(LaunchArgumentError,
                       match="real_time_factor needs an SDF world file it can read, got 'x.sdf'"):
        gazebo_arguments('x.sdf', True, '0.5')
    broken = tmp_path / 'broken.sdf'
    broken.write_text('<sdf><world>')
    with pytest.raises(LaunchArgumentError, match='broken.sdf'):
        gazebo_arguments(str(broken), True, '0.5')


def test_gazebo_in_lock_step_starts_paused_and_unpaced(tmp_path):
    world = world_file(tmp_path, '<max_step_size>0.001</max_step_size>')
    assert gazebo_arguments(world, True, '', lock_step=True) == f'-s -z 1e+06 {world}'
    assert control_service(world) == '/world/w/control'
    with pytest.raises(LaunchArgumentError, match='real_time_factor: in lock-step'):
        gazebo_arguments(world, True, '0.5', lock_step=True)


def test_the_project_worlds_control_service():
    world = os.path.join(os.path.dirname(__file__), '..', 'config', 'worlds', 'quad_x.sdf')
    assert control_service(world) == '/world/quad_x/control'


def test_gazebo_sim_control_takes_none_or_gz_control_world(tmp_path):
    assert parse_gazebo_sim_control('gz_control_world')
    assert not parse_gazebo_sim_control('none')
    with pytest.raises(LaunchArgumentError, match="sim_control: 'simulation_interfaces' is not"):
        parse_gazebo_sim_control('simulation_interfaces')
    nameless = tmp_path / 'nameless.sdf'
    nameless.write_text('<sdf version="1.9"><world></world></sdf>')
    with pytest.raises(LaunchArgumentError, match='has no <world name='):
        control_service(str(nameless))
