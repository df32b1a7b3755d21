"""The code style ament_flake8 enforces on ROS 2 Python packages (setup.cfg [flake8])."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')


def test_flake8():
    pytest.importorskip('flake8', reason='flake8 is a test dependency: pip install .[test]')
    for plugin in ('flake8_quotes', 'flake8_import_order'):
        pytest.importorskip(plugin, reason=f'{plugin} enforces the ament_flake8 rules')
    result = subprocess.run([sys.executable, '-m', 'flake8'], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
