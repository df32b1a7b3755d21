"""
The lint `colcon test` runs on ament_python packages, run by the suite too.

ament_flake8 with this package's setup.cfg (ament's rules: 99 columns, single quotes, Google
import order) and ament_pep257 with ament's defaults. Both come with ROS 2 (or its PyPI
wheels, the jazzy and kilted extras); where they are missing the tests skip and say so.
"""

import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
SOURCES = ['ardupilot_json_bridge', 'test', 'benchmarks', 'launch', 'setup.py']


@pytest.fixture(autouse=True)
def at_package_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_flake8():
    flake8 = pytest.importorskip('ament_flake8.main', reason='needs ament_flake8 (ROS 2, or '
                                                             "pip install '.[jazzy]')")
    code, errors = flake8.main_with_errors(argv=['--config', 'setup.cfg', *SOURCES])
    assert code == 0, f'{len(errors)} flake8 finding(s):\n' + '\n'.join(errors)


def test_pep257(capsys):
    pep257 = pytest.importorskip('ament_pep257.main', reason='needs ament_pep257 (ROS 2, or '
                                                             "pip install '.[jazzy]')")
    code = pep257.main(argv=SOURCES)
    assert code == 0, capsys.readouterr().out
