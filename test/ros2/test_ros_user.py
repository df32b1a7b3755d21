"""
What a ROS user meets with the ros2 command line (issue 34).

Parameter sets on both nodes of mujoco.launch.py, a params_file that is no file, and the
Gazebo preset given to it.
"""

from concurrent.futures import ThreadPoolExecutor
import subprocess
from typing import Dict

import pytest
import yaml

from ros2_tools import free_instances, launch, ros2, share, stop

pytestmark = pytest.mark.usefixtures('sourced_ros2')
# Light on a busy machine: the simulator at 250 Hz and half speed.
LIGHT = ('imu_rate:=250.0', 'odom_rate:=250.0', 'real_time_factor:=0.5')


def dumped(node: str) -> Dict[str, object]:
    """Return a node's parameters as `ros2 param dump` gives them."""
    result = ros2('param', 'dump', node)
    assert result.returncode == 0, result.stdout
    (body,) = yaml.safe_load(result.stdout).values()
    return body['ros__parameters']


def flattened(tree: Dict[str, object], prefix: str = '') -> Dict[str, object]:
    """Return nested parameters (outputs.motors.type) by their dotted names."""
    flat: Dict[str, object] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flattened(value, f'{prefix}{key}.'))
        else:
            flat[prefix + key] = value
    return flat


def test_ros2_param_set_on_every_parameter_of_both_nodes():
    (instance,) = free_instances(1)
    launched = launch('mujoco.launch.py', f'first_instance:={instance}', *LIGHT)
    namespace = f'/quad{instance}'
    try:
        assert launched.wait_for_text('listening on UDP', 90), launched.output
        assert launched.wait_for_text('MuJoCo', 60), launched.output
        for node, live in ((f'{namespace}/mujoco_sim', {'use_sim_time'}),
                           (f'{namespace}/json_sitl_bridge',
                            {'use_sim_time', 'fresh_timeout', 'peer_timeout', 'max_backlog',
                             'max_odometry_lag', 'max_optional_age', 'horizon'})):
            values = flattened(dumped(node))
            assert live <= set(values), sorted(values)

            def set_again(name: str, node: str = node) -> subprocess.CompletedProcess:
                text = yaml.safe_dump(values[name], default_flow_style=True).split('\n')[0]
                return ros2('param', 'set', node, name, text)

            # Three `ros2 param set` at a time: each is a process of its own (a second of
            # Python start-up; one after another took CI 140 s).
            with ThreadPoolExecutor(3) as pool:
                results = dict(zip(sorted(values), pool.map(set_again, sorted(values))))
            for name, result in results.items():
                if name in live:
                    assert result.stdout.startswith('Set parameter successful'), \
                        (node, name, result.stdout)
                else:
                    assert 'read-only' in result.stdout, (node, name, result.stdout)
            # Both nodes live on, and the simulator's clock still runs.
            assert launched.group_alive()
        assert 'Traceback' not in launched.output and 'AttributeError' not in launched.output
        assert ros2('topic', 'echo', '--once', '/clock', timeout=30).returncode == 0
    finally:
        stop(launched)


def test_a_params_file_that_is_no_file_is_one_launch_error(tmp_path):
    missing = str(tmp_path / 'quad_x.yml')
    launched = launch('mujoco.launch.py', f'params_file:={missing}', *LIGHT)
    try:
        assert launched.wait_for(lambda: launched.process.poll() is not None, 60)
    finally:
        launched.close()
    assert launched.process.returncode != 0
    assert f"params_file: '{missing}' is not a file" in launched.output
    assert 'listening on UDP' not in launched.output and 'MuJoCo' not in launched.output


def test_the_gazebo_preset_makes_the_simulator_take_actuators():
    pytest.importorskip('actuator_msgs.msg', reason='needs actuator_msgs')
    (instance,) = free_instances(1)
    launched = launch('mujoco.launch.py', f'first_instance:={instance}',
                      f'params_file:={share("config", "quad_x.yaml")}', *LIGHT)
    topic = f'/quad{instance}/command/motor_speed'
    try:
        assert launched.wait_for_text('listening on UDP', 90), launched.output
        assert launched.wait_for_text('MuJoCo', 60), launched.output
        info = ros2('topic', 'info', topic, timeout=30).stdout
        assert 'Type: actuator_msgs/msg/Actuators' in info, info
        assert 'Subscription count: 1' in info and 'Publisher count: 1' in info, info
    finally:
        stop(launched)
