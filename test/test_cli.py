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
