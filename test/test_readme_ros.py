"""
The README's ROS 2 section is what CI runs: each of its commands is run by a test.

Every command line of the section's code blocks must appear in the sources of the tests that
run them (test/ros2, the node, fleet and mujoco_sim tests, .ci/ros2), word by word: its
executable and verb, each option and each name:= argument. The few that cannot run here say
why, below and in the README.
"""

import glob
import os
import re
from typing import List

ROOT = os.path.join(os.path.dirname(__file__), '..')
# Commands the tests cannot run here, by their first words, and why.
NOT_HERE = {
    'sim_vehicle.py': 'ArduPilot source tree tool; the tests start the prebuilt arducopter',
    'mkdir': 'workspace set-up, done by .ci/ros2 in a temporary folder',
    'git clone': '.ci/ros2 copies the checkout instead',
    'rosdep install': 'no rosdep database here; .ci/ros2 installs with pip',
    'ros2 launch ardupilot_json_bridge gazebo.launch.py':
        "no Gazebo here: checked through launch's API instead",
}


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


def words(command: str) -> List[str]:
    """Return what a test must spell: the words, options and name:= keys, not the values."""
    command = re.sub(r'\$\([^)]*\)\S*', '', command)
    needed = []
    for token in command.split():
        if token.startswith('<') or token.endswith('.yaml') or token.startswith('/'):
            continue
        needed.append(token.split(':=')[0] + ':=' if ':=' in token else token)
    return needed


def test_readme_has_ros_commands():
    commands = ros_section_commands()
    assert any(c.startswith('ros2 bag record') for c in commands)
    assert any(c.startswith('ros2 launch ardupilot_json_bridge mujoco.launch.py')
               for c in commands)


def test_every_ros_command_of_the_readme_is_run_by_a_test():
    sources = {}
    for pattern in ('test/ros2/*.py', 'test/ros2_tools.py', 'test/test_node*.py', '.ci/ros2',
                    'test/test_mujoco_fleet.py', 'test/test_mujoco_sim.py'):
        for path in glob.glob(os.path.join(ROOT, pattern)):
            with open(path) as stream:
                sources[os.path.relpath(path, ROOT)] = stream.read()
    everything = '\n'.join(sources.values())
    unrun = {}
    for command in ros_section_commands():
        if any(command.startswith(first) for first in NOT_HERE):
            continue
        missing = [word for word in words(command) if word not in everything]
        if missing:
            unrun[command] = missing
    assert unrun == {}, 'README commands no test spells out: ' + repr(unrun)


def test_the_readme_says_what_cannot_run_here():
    with open(os.path.join(ROOT, 'README.md')) as stream:
        text = stream.read()
    assert 'Gazebo cannot\nrun on our machines' in text
