"""The command line's own arguments: every subcommand prints its usage, none starts on a typo."""

import subprocess
import sys

import pytest


def cli(*args: str) -> subprocess.CompletedProcess:
    """Run the CLI; a node that starts instead of printing its usage fails the test, stopped."""
    command = [sys.executable, '-m', 'ardupilot_json_bridge.cli', *args]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f'{" ".join(args)} was still running after 20 s (it started instead of '
                    f'answering); stderr: {(expired.stderr or b"")[-500:]!r}')


@pytest.mark.parametrize('command', ['node', 'mujoco-sim', 'replay', 'mujoco', 'fdmdata',
                                     'check'])
def test_help_prints_the_usage_of_every_subcommand(command):
    result = cli(command, '--help')
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stdout.startswith(f'usage: ardupilot-json-bridge {command}'), result.stdout


@pytest.mark.parametrize('command', ['node', 'mujoco-sim'])
def test_an_unknown_flag_before_ros_args_is_refused(command):
    result = cli(command, '--params-file', 'x.yaml', '--ros-args', '-r', '__ns:=/quad')
    assert result.returncode == 2, result.stderr[-500:]
    assert 'unrecognized arguments: --params-file x.yaml' in result.stderr, result.stderr
    assert f'usage: ardupilot-json-bridge {command}' in result.stderr, result.stderr


def test_the_top_level_help_names_the_ros_nodes():
    result = cli('--help')
    assert result.returncode == 0
    assert 'node' in result.stdout and 'mujoco-sim' in result.stdout, result.stdout


def refusal(result: subprocess.CompletedProcess) -> str:
    """Return the one line a refused command printed (exit 2, no traceback), or fail."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and 'Traceback' not in result.stderr and len(lines) == 1, \
        f'exit {result.returncode}, stderr:\n{result.stderr[-2000:]}'
    return lines[0]


def test_a_missing_or_broken_config_file_is_one_line(tmp_path):
    # Each was a FileNotFoundError or a yaml ParserError traceback.
    assert '/nonexistent.yaml: cannot read it (No such file or directory)' in refusal(
        cli('replay', '--config', '/nonexistent.yaml'))
    broken = tmp_path / 'broken.yaml'
    broken.write_text('/**:\n  ros__parameters: [\n')
    line = refusal(cli('replay', '--config', str(broken)))
    assert f'{broken}: not YAML:' in line and 'line 3' in line, line


def test_a_host_without_an_address_is_one_line():
    # socket.gaierror, with a traceback; .invalid never resolves (RFC 2606).
    line = refusal(cli('fdmdata', '--host', 'nosuchhost.invalid'))
    assert "--host 'nosuchhost.invalid': no IPv4 address" in line, line


@pytest.mark.parametrize('arguments, message', [
    # Each was a traceback, a hang or a busy loop: the numbers must be finite and in range.
    (['fdmdata', '--host', '127.0.0.1', '--timeout', 'inf'],
     '--timeout: expected a finite number, got inf'),
    (['fdmdata', '--host', '127.0.0.1', '--rate', 'nan'],
     '--rate: expected a finite number, got nan'),
    (['fdmdata', '--host', '127.0.0.1', '--rate', '0'], '--rate: 0 is not above 0'),
    (['fdmdata', '--host', '127.0.0.1', '--smoothing', 'nan'],
     '--smoothing: expected a finite number, got nan'),
    (['fdmdata', '--host', '127.0.0.1', '--data-port', '70000'],
     '--data-port: 70000 is above the maximum 65535'),
    (['fdmdata', '--host', '127.0.0.1', '--servo-max', 'inf'],
     '--servo-max: expected a finite number, got inf'),
    (['replay', '--rate', 'nan'], '--rate: expected a finite number, got nan'),
    (['replay', '--rate', 'inf'], '--rate: expected a finite number, got inf'),
    (['replay', '--rate', '-1'], '--rate: -1 is below the minimum 0'),
    (['mujoco', '--gust', 'nan'], '--gust: expected a finite number, got nan'),
    # 9002 + 10 x 5654 = 65542: the second vehicle's port does not exist.
    (['mujoco', '--instance', '5653', '--vehicles', '2'],
     'vehicles: 2 vehicles from instance 5653 reach instance 5654'),
    (['mujoco', '--vehicles', '0'], 'vehicles: 0 is below the minimum 1'),
])
def test_a_number_that_cannot_work_is_refused_in_one_line(arguments, message):
    line = refusal(cli(*arguments))
    assert message in line, line


def test_check_names_a_topic_of_the_wrong_type_as_replay_does(tmp_path):
    # check stopped with an AttributeError on the first message; replay named the types.
    import ros_messages as msgs
    from ardupilot_json_bridge.sources.bagfile import write_bag
    store = msgs.STORES['jazzy']
    bag = tmp_path / 'wrong'
    write_bag(str(bag), [
        ('/imu', 'std_msgs/msg/Float64', 1_000_000, msgs.float64(store, 9.8)),
        ('/odom', 'nav_msgs/msg/Odometry', 2_000_000,
         msgs.odometry(store, 0.002, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), (0.0, 0.0, 0.0))),
    ], store)
    expected = f'/imu in {bag} is std_msgs/msg/Float64, but the imu input reads ' \
               'sensor_msgs/msg/Imu'
    assert expected in refusal(cli('check', str(bag)))
    assert expected in refusal(cli('replay', str(bag)))
