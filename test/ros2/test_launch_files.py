"""
Each launch file under `ros2 launch`, as users start them, served to SITL peers.

bridge.launch.py and fleet.launch.py against test/sitl_peer.py and a simulator stand-in;
`ros2 param get/set` on the launched node; gazebo.launch.py checked without running Gazebo:
what it would start resolves to files of the install and to ros_gz_sim's real gz_sim.launch.py,
with arguments that file declares (its flight in real Gazebo: test_gazebo_flight.py). Every
launch ends by Ctrl-C (SIGINT to its process group), which must stop all within seconds.
"""

import os
from typing import Dict, List

import pytest

from conftest import motor_command
from ros2_tools import free_instances, launch, preset_with, ros2, Running, share, stop
from sitl_peer import SitlPeer

pytestmark = pytest.mark.usefixtures('sourced_ros2')


@pytest.fixture
def simulator():
    """Make simulator stand-ins (test_node_process.Simulator) for given namespaces."""
    from test_node_process import Simulator
    made = []

    def make(easts: Dict[str, float]) -> 'Simulator':
        made.append(Simulator(easts))
        return made[-1]

    yield make
    for each in made:
        each.close()


def link_messages(simulator, namespace: str) -> List[str]:
    return [status.message for report in simulator.diagnostics for status in report.status
            if status.name == f'{namespace}/json_sitl_bridge: SITL link']


def parameters_file(tmp_path) -> str:
    """Write the MuJoCo preset with values of its own, to read back with ros2 param get."""
    return preset_with(str(tmp_path), 'params.yaml',
                       '    fresh_timeout: 0.75\n    max_backlog: 10.0\n')


def test_bridge_launch_serves_publishes_and_takes_parameters(simulator, tmp_path):
    (instance,) = free_instances(1)
    sim = simulator({'uav0': 3.0})
    peer = SitlPeer(9002 + 10 * instance)
    launched = launch('bridge.launch.py', 'namespace:=uav0', f'instance:={instance}',
                      f'params_file:={parameters_file(tmp_path)}')
    try:
        assert launched.wait_for_text('listening on UDP', 60), launched.output
        replies = peer.lock_step(200, [1500] * 4 + [1000] * 12, timeout=30.0)
        assert len(replies) == 200, launched.output[-2000:]
        assert replies[-1]['position'] == pytest.approx((0.0, 3.0, 0.0))  # ENU x is east
        assert replies[-1]['imu.accel_body'] == pytest.approx((0.0, 0.0, -9.80665))
        assert launched.wait_for(lambda: sim.commands['uav0'], 15)
        assert sim.commands['uav0'][-1] == pytest.approx([motor_command(1500)] * 4)
        assert launched.wait_for(
            lambda: any(m.startswith('connected') for m in link_messages(sim, 'uav0')), 15)

        node = '/uav0/json_sitl_bridge'
        assert 'Double value is: 0.75' in ros2('param', 'get', node, 'fresh_timeout').stdout
        assert 'Double value is: 10.0' in ros2('param', 'get', node, 'max_backlog').stdout
        got = ros2('param', 'get', node, 'instance').stdout
        assert f'Integer value is: {instance}' in got, got
        assert 'True' in ros2('param', 'get', node, 'use_sim_time').stdout
        changed = ros2('param', 'set', node, 'max_odometry_lag', '0.3').stdout
        assert 'Set parameter successful' in changed, changed
        assert 'Double value is: 0.3' in ros2('param', 'get', node, 'max_odometry_lag').stdout
        refused = ros2('param', 'set', node, 'instance', '7').stdout
        assert 'Setting parameter failed' in refused and 'read-only' in refused, refused
        invalid = ros2('param', 'set', node, 'fresh_timeout', '-1.0').stdout
        assert 'Setting parameter failed' in invalid and 'fresh_timeout' in invalid, invalid
        # The node still serves after all that.
        assert len(peer.lock_step(50, [1500] * 16, timeout=20.0)) == 50
        print(f'ros2 param set instance 7: {refused.strip()}; fresh_timeout -1.0: '
              f'{invalid.strip()}')
    finally:
        peer.close()
        output = stop(launched)
    assert '[bridge-1]: process has finished cleanly' in output


def test_fleet_launch_three_namespaces_each_on_its_own_port(simulator, tmp_path):
    instances = free_instances(3)
    namespaces = [f'uav{n}' for n in instances]
    easts = {ns: float(k) - 1.0 for k, ns in enumerate(namespaces)}
    pwms = {ns: 1200 + 250 * k for k, ns in enumerate(namespaces)}
    sim = simulator(easts)
    peers = {ns: SitlPeer(9002 + 10 * n) for ns, n in zip(namespaces, instances)}
    launched = launch('fleet.launch.py', 'count:=3', 'namespace_prefix:=uav',
                      f'first_instance:={instances[0]}',
                      f'params_file:={parameters_file(tmp_path)}')
    try:
        assert launched.wait_for_text('listening on UDP', 60, count=3), launched.output
        for ns, peer in peers.items():
            replies = peer.lock_step(100, [pwms[ns]] * 4 + [1000] * 12, timeout=30.0)
            assert len(replies) == 100, (ns, launched.output[-2000:])
            assert {reply['position'][1] for reply in replies} == {easts[ns]}, ns
        for ns in namespaces:
            assert launched.wait_for(lambda: sim.commands[ns], 15), ns
            expected = [motor_command(pwms[ns])] * 4
            assert all(c == pytest.approx(expected) for c in sim.commands[ns]), ns
        nodes = ros2('node', 'list').stdout.split()
        assert {f'/{ns}/json_sitl_bridge' for ns in namespaces} <= set(nodes), nodes
    finally:
        for peer in peers.values():
            peer.close()
        output = stop(launched)
    assert output.count('process has finished cleanly') == 3, output


# Where ../shared/tools/gz-harmonic installs ros_gz (built on Jazzy; its gz_sim.launch.py loads
# on Humble's launch too).
SHARED_ROS_GZ = '/opt/gz/harmonic/ros'


def ros_gz_sim_prefix() -> str:
    """Return the install prefix holding ros_gz_sim (sourced, or ../shared's), or skip."""
    from ament_index_python.packages import get_package_prefix, PackageNotFoundError
    try:
        return get_package_prefix('ros_gz_sim')
    except PackageNotFoundError:
        pass
    marker = os.path.join(SHARED_ROS_GZ, 'share', 'ament_index', 'resource_index', 'packages',
                          'ros_gz_sim')
    if not os.path.isfile(marker):
        pytest.skip('needs ros_gz_sim (ros-$ROS_DISTRO-ros-gz, or ../shared/tools/gz-harmonic)')
    return SHARED_ROS_GZ


def test_gazebo_launch_starts_installed_files_with_ros_gz_arguments(monkeypatch):
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
    from launch.launch_description_sources import get_launch_description_from_python_launch_file
    from launch_ros.actions import Node
    import yaml

    result = ros2('launch', 'ardupilot_json_bridge', 'gazebo.launch.py', '--show-args')
    assert result.returncode == 0 and 'Traceback' not in result.stdout, result.stdout
    for name in ('world', 'bridge_config', 'params_file', 'instance', 'server_only',
                 'real_time_factor', 'sim_control'):
        assert f"'{name}'" in result.stdout

    description = get_launch_description_from_python_launch_file(
        share('launch', 'gazebo.launch.py'))
    entities = description.entities
    defaults = {e.name: ''.join(s.perform(None) for s in e.default_value)
                for e in entities if isinstance(e, DeclareLaunchArgument)}
    # Every file it would start from is in the install.
    assert defaults['world'] == share('config', 'worlds', 'quad_x.sdf')
    assert defaults['bridge_config'] == share('config', 'gz_bridge_quad.yaml')
    assert defaults['params_file'] == share('config', 'quad_x.yaml')
    assert all(os.path.isfile(defaults[name])
               for name in ('world', 'bridge_config', 'params_file'))

    # ros_gz_sim's own gz_sim.launch.py, found through the ament index as `ros2 launch` finds it.
    prefix = ros_gz_sim_prefix()
    monkeypatch.setenv('AMENT_PREFIX_PATH', f"{prefix}:{os.environ['AMENT_PREFIX_PATH']}")
    real = os.path.join(prefix, 'share', 'ros_gz_sim', 'launch', 'gz_sim.launch.py')
    context = LaunchContext()
    context.launch_configurations.update(
        {'world': defaults['world'], 'server_only': 'true', 'real_time_factor': '0.5'})
    (gazebo,) = [e for e in entities if isinstance(e, OpaqueFunction)]
    (gz,) = gazebo.execute(context)
    (bridge,) = [e for e in entities if isinstance(e, IncludeLaunchDescription)]
    for include in (gz, bridge):
        include.launch_description_source.get_launch_description(context)
    assert gz.launch_description_source.location == real
    # The arguments passed are those the real files declare (read by launch, not listed here).
    declared = {a.name for a in get_launch_description_from_python_launch_file(
        real).get_launch_arguments()}
    passed = {name for name, _ in gz.launch_arguments}
    assert passed and passed <= declared, (passed, declared)
    # Server only, the world's 1 ms steps 500 times a wall second: half speed.
    assert dict(gz.launch_arguments)['gz_args'] == f"-r -s -z 500 {defaults['world']}"
    assert bridge.launch_description_source.location == share('launch', 'bridge.launch.py')
    assert {name for name, _ in bridge.launch_arguments} <= {
        a.name for a in get_launch_description_from_python_launch_file(
            share('launch', 'bridge.launch.py')).get_launch_arguments()}
    # ros_gz_bridge's parameter_bridge, configured by its documented config_file parameter.
    (topics,) = [e for e in entities if isinstance(e, Node)]
    assert topics.node_package == 'ros_gz_bridge'
    assert topics.node_executable == 'parameter_bridge'
    (parameters,) = topics._Node__parameters   # launch_ros keeps them unevaluated till launch
    names = {''.join(part.perform(None) for part in name) for name in parameters}
    assert names == {'config_file', 'use_sim_time'}

    # Lock-step: Gazebo paused and unpaced, the world's ControlWorld bridged, the bridge on it.
    context.launch_configurations.update({'sim_control': 'gz_control_world',
                                          'real_time_factor': '', 'instance': '3',
                                          'bridge_config': defaults['bridge_config'],
                                          'params_file': defaults['params_file']})
    gz, topics, bridge = gazebo.execute(context)
    assert dict(gz.launch_arguments)['gz_args'] == f"-s -z 1e+06 {defaults['world']}"
    assert list(topics._Node__arguments) == \
        ['/world/quad_x/control@ros_gz_interfaces/srv/ControlWorld']
    assert bridge.node_executable == 'bridge'

    def text(value):   # substitutions (launch_ros keeps a string as YAML), or a plain value
        if isinstance(value, (list, tuple)):
            return yaml.safe_load(''.join(part.perform(context) for part in value))
        return value

    given = {text(name): text(value) for group in bridge._Node__parameters
             if isinstance(group, dict) for name, value in group.items()}
    assert given['sim_control'] == 'gz_control_world', given
    assert given['sim_control_service'] == '/world/quad_x/control', given
    assert given['instance'] == 3, given


def gazebo_fleet_function(overrides: Dict[str, str]):
    """Return gazebo_fleet.launch.py's OpaqueFunction and a context: defaults, then overrides."""
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch.launch_description_sources import get_launch_description_from_python_launch_file

    entities = get_launch_description_from_python_launch_file(
        share('launch', 'gazebo_fleet.launch.py')).entities
    context = LaunchContext()
    context.launch_configurations.update(
        {e.name: ''.join(s.perform(None) for s in e.default_value)
         for e in entities if isinstance(e, DeclareLaunchArgument)})
    context.launch_configurations.update(overrides)
    (gazebo,) = [e for e in entities if isinstance(e, OpaqueFunction)]
    return gazebo, context


@pytest.mark.parametrize('overrides, message', [
    ({'real_time_factor': '2'}, 'real_time_factor: 2 is not above 0 and at most 1'),
    ({'real_time_factor': 'abc'}, "real_time_factor: expected a real-time factor, got 'abc'"),
    ({'server_only': 'maybe'}, "server_only: expected true or false, got 'maybe'"),
    ({'model': "it's"}, 'has no <model name="it\'s">'),
    ({'params_file': '/no/such.yaml'}, "params_file: '/no/such.yaml' is not a file"),
    ({'count': '0'}, 'count: 0 is outside')],
    ids=['rtf_2', 'rtf_abc', 'server_only', 'model_quote', 'params_file', 'count'])
def test_gazebo_fleet_launch_fails_in_one_line_and_leaves_no_folder(
        monkeypatch, tmp_path, overrides, message):
    import tempfile

    from ardupilot_json_bridge.ros.launch_config import LaunchArgumentError

    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    gazebo, context = gazebo_fleet_function({'server_only': 'true', **overrides})
    with pytest.raises(LaunchArgumentError) as error:
        gazebo.execute(context)
    assert message in str(error.value) and '\n' not in str(error.value)
    assert os.listdir(tmp_path) == []


def test_gazebo_fleet_launch_writes_its_files_and_removes_them_on_shutdown(
        monkeypatch, tmp_path):
    import tempfile

    from launch.actions import RegisterEventHandler
    from launch.events import Shutdown
    import yaml

    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    gazebo, context = gazebo_fleet_function({'server_only': 'true', 'real_time_factor': '0.5'})
    removal, gz, topics = gazebo.execute(context)
    (folder,) = [os.path.join(tmp_path, name) for name in os.listdir(tmp_path)]
    world = os.path.join(folder, 'fleet_world.sdf')
    assert dict(gz.launch_arguments)['gz_args'] == f'-r -s -z 500 {world}'
    with open(os.path.join(folder, 'gz_bridge_fleet.yaml')) as stream:
        assert {e['ros_topic_name'] for e in yaml.safe_load(stream)} >= {
            '/vehicle0/odom', '/vehicle1/odom', '/vehicle1/command/motor_speed'}
    assert topics.node_executable == 'parameter_bridge'
    assert isinstance(removal, RegisterEventHandler)
    removal.event_handler.handle(Shutdown(), context)
    assert os.listdir(tmp_path) == []


def readme_line(start: str) -> str:
    """Return the README's command line beginning with start, continuation lines joined."""
    with open(os.path.join(os.path.dirname(__file__), '..', '..', 'README.md')) as stream:
        text = stream.read().replace('\\\n', ' ')
    (line,) = [line for line in text.splitlines() if line.startswith(start)]
    return ' '.join(line.split('#')[0].split())


@pytest.mark.parametrize('start', ['ros2 launch ardupilot_json_bridge bridge.launch.py '
                                   'namespace:=uav0 instance:=0',
                                   'ros2 run ardupilot_json_bridge bridge'])
def test_the_readmes_other_engine_commands_serve_sitl(start, simulator, tmp_path):
    """Run the README's lines as written (in bash), on a free instance and a parameters file."""
    (instance,) = free_instances(1)
    simulator({'uav0': 2.0})
    line = readme_line(start).replace('instance:=0', f'instance:={instance}')
    line = line.replace('my.yaml', parameters_file(tmp_path))
    if 'ros2 run' in line:
        line += f' -p instance:={instance} -p use_sim_time:=true'
    peer = SitlPeer(9002 + 10 * instance)
    started = Running(['bash', '-c', f'exec {line}'])
    try:
        assert started.wait_for_text('listening on UDP', 60), started.output
        replies = peer.lock_step(100, [1500] * 16, timeout=30.0)
        assert len(replies) == 100, started.output[-2000:]
        assert replies[-1]['position'] == pytest.approx((0.0, 2.0, 0.0))
        if 'rover.yaml' in line:
            assert 'steering' in ros2('param', 'get', '/uav0/json_sitl_bridge',
                                      'output_groups').stdout
    finally:
        peer.close()
        _, ended = started.interrupt()
    assert ended and 'Traceback' not in started.output, started.output[-2000:]
