"""
package.xml declares what the code imports: ROS packages, Python libraries, ros2 verbs.

Imports are read from the sources with ast; package.xml with ElementTree, not with the
code under test. What the package and its launch files import must be an exec dependency;
what the tests and benchmarks import, a test (or exec) dependency; every `ros2 <verb>` the
tests run needs its ros2<verb> package.
"""

import ast
import glob
import os
import re
import sys
from typing import Dict, Iterable, Set
import xml.etree.ElementTree as ElementTree

ROOT = os.path.join(os.path.dirname(__file__), '..')
PACKAGE = 'ardupilot_json_bridge'
# Python libraries by their rosdep keys, as a ROS user installs them.
ROSDEP_KEYS = {'numpy': 'python3-numpy', 'yaml': 'python3-yaml', 'pytest': 'python3-pytest',
               'hypothesis': 'python3-hypothesis', 'scipy': 'python3-scipy',
               'transforms3d': 'python3-transforms3d', 'catkin_pkg': 'python3-catkin-pkg',
               'setuptools': 'python3-setuptools'}
# Optional, from PyPI only (no rosdep key): setup.py's extras, and the tests skip without them.
PIP_EXTRAS = {'mujoco', 'rosbags', 'pymavlink', 'psutil'}


def declared(kinds: Iterable[str]) -> Set[str]:
    root = ElementTree.parse(os.path.join(ROOT, 'package.xml')).getroot()
    return {element.text.strip() for kind in kinds for element in root.iter(kind)}


def imported(patterns: Iterable[str]) -> Dict[str, str]:
    """Return {top-level module: first file importing it} for the files matching patterns."""
    # The package, and the tests' and benchmarks' modules of their own (found beside them).
    local = {PACKAGE} | {os.path.splitext(os.path.basename(path))[0]
                         for folder in ('test', 'benchmarks')
                         for path in glob.glob(os.path.join(ROOT, folder, '**', '*.py'),
                                               recursive=True)}
    modules: Dict[str, str] = {}
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            with open(path) as stream:
                tree = ast.parse(stream.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split('.')[0]
                    if top not in sys.stdlib_module_names and top not in local:
                        modules.setdefault(top, os.path.relpath(path, ROOT))
    return modules


def missing(modules: Dict[str, str], have: Set[str]) -> Dict[str, str]:
    """Return {dependency: importing file} for imports package.xml does not declare."""
    gaps = {}
    for module, path in modules.items():
        if module in PIP_EXTRAS:
            continue
        key = ROSDEP_KEYS.get(module, module)   # a ROS package's Python module is its name
        if key not in have:
            gaps[key] = path
    return gaps


def test_everything_the_package_and_launch_files_import_is_an_exec_dependency():
    runtime = imported(['ardupilot_json_bridge/**/*.py', 'launch/*.py'])
    assert {'rclpy', 'launch', 'launch_ros', 'rcl_interfaces', 'rosgraph_msgs'} <= set(runtime)
    assert missing(runtime, declared(['exec_depend', 'depend'])) == {}


def test_everything_the_tests_import_is_a_dependency():
    tests = imported(['test/**/*.py', 'benchmarks/**/*.py', 'setup.py'])
    assert missing(tests, declared(['test_depend', 'exec_depend', 'depend',
                                    'buildtool_depend'])) == {}


def test_every_ros2_verb_the_tests_run_is_a_test_dependency():
    verbs = set()
    for path in glob.glob(os.path.join(ROOT, 'test', '**', '*.py'), recursive=True):
        with open(path) as stream:
            verbs |= set(re.findall(r"(?:'ros2', |ros2\()'([a-z]+)'", stream.read()))
    assert {'launch', 'bag', 'param'} <= verbs
    have = declared(['test_depend', 'exec_depend'])
    assert {f'ros2{verb}' for verb in verbs} - have == set()
    assert 'rosbag2_storage_mcap' in have   # ros2 bag record -s mcap


def test_the_gap_finder_finds_gaps():
    assert missing({'rclpy': 'a.py', 'numpy': 'b.py', 'mujoco': 'c.py'}, {'rclpy'}) == {
        'python3-numpy': 'b.py'}
