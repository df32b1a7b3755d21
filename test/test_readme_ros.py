"""
The README's ROS 2 section, command by command, through the real tools' own parsers.

`ros2 ...` lines go through ros2cli's parser (the verbs' real options: a misspelt or missing
option fails), their `--ros-args` through rcl's (rclpy.init, which also loads a parameters
file), `ardupilot-json-bridge ...` through the project's CLI parser; the workspace lines must
be run verbatim by .ci/ros2. test/ros2 runs the commands themselves (the launch files, bag
record, play and info, ros2 run, the node). What cannot run here says why, below.
"""

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
from typing import List, Set

import pytest

from ardupilot_json_bridge.cli import parse_arguments, ROS_ARGS

ROOT = os.path.join(os.path.dirname(__file__), '..')
# Commands no parser here knows, by their first words, and why.
NOT_HERE = {
    'sim_vehicle.py': 'ArduPilot source tree tool; the tests start the prebuilt arducopter',
    'mkdir': 'workspace set-up, done by .ci/ros2 in a temporary folder',
    'git clone': '.ci/ros2 copies the checkout instead',
    'rosdep install': 'no rosdep database here; .ci/ros2 installs with pip',
}
# Run as written by .ci/ros2 (the workspace's build).
RUN_BY_CI = ('colcon build', 'source install/setup.bash')
# Placeholders and the shell's $(...) replaced by something real, for the parsers.
PRESET = os.path.join(ROOT, 'config', 'quad_x.yaml')


def ros_section_commands() -> List[str]:
    """Return the command lines of the README between '## With ROS 2' and the next '## '."""
    with open(os.path.join(ROOT, 'README.md')) as stream:
        text = stream.read()
    section = text.split('\n## With ROS 2\n', 1)[1].split('\n## ', 1)[0]
    commands = []
    for block in re.findall(r'```bash\n(.*?)```', section, re.S):
        for line in block.replace('\\\n', ' ').splitlines():
            command = re.split(r'(?:^|\s)#', line)[0].strip()
            for part in re.split(r'\s*&&\s*', command):
                if part and not part.startswith('cd '):
                    commands.append(' '.join(part.split()))
    return commands


def argv_of(command: str) -> List[str]:
    """Split a README command as bash would, placeholders and files made real."""
    command = re.sub(r'\$\([^)]*\)\S*', PRESET, command)
    command = re.sub(r'<[^>]*>', PRESET, command)
    return [PRESET if word == 'my.yaml' else word for word in shlex.split(command)]


def parse_with_ros2cli(argv: List[str]) -> None:
    """Parse ros2's arguments as `ros2` does (ros2cli.cli.main), running nothing."""
    from ros2cli.command import add_subparsers_on_demand
    errors = io.StringIO()
    program = sys.argv
    sys.argv = ['ros2', *argv]   # the verbs' own on-demand subparsers read it
    try:
        parser = argparse.ArgumentParser(prog='ros2')
        add_subparsers_on_demand(parser, 'ros2', '_command', 'ros2cli.command',
                                 required=False, argv=argv)
        with contextlib.redirect_stderr(errors):
            parser.parse_args(argv)
    except SystemExit as exit:
        raise AssertionError(f'ros2 {" ".join(argv)}: {errors.getvalue()}') from exit
    finally:
        sys.argv = program


def parse_ros_arguments(argv: List[str]) -> None:
    """Parse `--ros-args ...` with rcl (rclpy.init), as the node's process does."""
    import rclpy
    if ROS_ARGS not in argv:
        return
    context = rclpy.Context()
    rclpy.init(args=['node', *argv[argv.index(ROS_ARGS):]], context=context)
    rclpy.shutdown(context=context)


def kind(command: str) -> str:
    """Return how a README command is checked here."""
    for first, why in NOT_HERE.items():
        if command.startswith(first):
            return 'not here: ' + why
    if command.startswith(RUN_BY_CI):
        return 'run by .ci/ros2'
    if command.startswith('pip install '):
        return 'pip'
    if command.startswith('ros2 '):
        return 'ros2'
    if command.startswith('ardupilot-json-bridge '):
        return 'ardupilot-json-bridge'
    return 'unknown'


def test_readme_has_ros_commands():
    commands = ros_section_commands()
    assert any(c.startswith('ros2 bag record') for c in commands)
    assert any(c.startswith('ros2 launch ardupilot_json_bridge mujoco.launch.py')
               for c in commands)
    assert [c for c in commands if kind(c) == 'unknown'] == []


def test_the_workspace_commands_are_run_by_ci_as_written():
    with open(os.path.join(ROOT, '.ci', 'ros2')) as stream:
        ci = ' '.join(stream.read().replace('\\\n', ' ').split())
    run = [c for c in ros_section_commands() if kind(c) == 'run by .ci/ros2']
    assert run and [c for c in run if c not in ci] == []


def extras_requirements() -> Set[str]:
    """Return the names of the distributions setup.py's extras require."""
    import ast
    with open(os.path.join(ROOT, 'setup.py')) as stream:
        tree = ast.parse(stream.read())
    (extras,) = [k.value for k in ast.walk(tree)
                 if isinstance(k, ast.keyword) and k.arg == 'extras_require']
    names = set()
    for requirements in ast.literal_eval(extras).values():
        names.update(re.split(r'[<>=\[ ]', requirement)[0] for requirement in requirements)
    return names


def test_the_readmes_pip_installs_name_the_projects_extras():
    installs = [argv_of(c)[2:] for c in ros_section_commands() if kind(c) == 'pip']
    assert installs and all(set(names) <= extras_requirements() for names in installs)


def test_the_readmes_cli_commands_parse():
    for command in ros_section_commands():
        if kind(command) == 'ardupilot-json-bridge':
            argv = argv_of(command)[1:]
            parse_arguments(argv[:argv.index(ROS_ARGS)] if ROS_ARGS in argv else argv)


def test_the_readmes_ros2_commands_parse_with_ros2cli_and_rcl(tmp_path, monkeypatch):
    pytest.importorskip('ros2cli', reason='needs ROS 2 sourced (ros2cli)')
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'flight').mkdir()   # the bag the README records, then plays
    checked = 0
    for command in ros_section_commands():
        if kind(command) in ('ros2', 'ardupilot-json-bridge'):
            argv = argv_of(command)
            if argv[0] == 'ros2':
                parse_with_ros2cli(argv[1:])
            parse_ros_arguments(argv)
            checked += 1
    assert checked >= 10
