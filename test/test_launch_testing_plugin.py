"""
The suite under ROS 2's launch_testing pytest plugin, as plain `pytest` and `colcon test` run it.

That plugin imports launch when pytest starts (launch then makes every new logger one that
does not propagate, so caplog saw nothing) and imports each test module itself (a module's
import skip then skipped the whole session). Two of the project's modules run here in a pytest
of their own with the plugin loaded: one with pymavlink made unimportable, one that reads its
warnings through caplog. Skips where launch_testing is not installed (ROS 2 not sourced).
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

from conftest import inner_pytest_environment

pytest.importorskip('launch_testing.pytest.hooks', reason='needs ROS 2 sourced (launch_testing)')

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
CAPLOG_TEST = 'test/test_state.py::test_repeated_and_late_stamps_are_dropped_counted_and_named'


def test_a_module_skip_and_caplog_under_the_launch_testing_plugin(tmp_path):
    hidden = tmp_path / 'hidden' / 'pymavlink'
    hidden.mkdir(parents=True)
    (hidden / '__init__.py').write_text("raise ImportError('pymavlink hidden by the test')\n")
    environment = inner_pytest_environment(str(hidden.parent), ROOT)
    environment.pop('PYTEST_DISABLE_PLUGIN_AUTOLOAD', None)
    report = tmp_path / 'report.xml'
    # -p launch_testing: loaded even where the outer pytest was told not to autoload plugins.
    result = subprocess.run(
        [sys.executable, '-m', 'pytest', '-p', 'launch_testing', '-p', 'launch_ros', '-q',
         '-p', 'no:cacheprovider', f'--junitxml={report}', 'test/test_flight_failure.py',
         CAPLOG_TEST], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    cases = list(ElementTree.parse(report).iter('testcase'))
    outcomes = {}
    for case in cases:
        kind = 'skipped' if case.find('skipped') is not None else (
            'failed' if case.find('failure') is not None or case.find('error') is not None
            else 'passed')
        outcomes[case.get('name')] = kind
    assert outcomes.get('test_repeated_and_late_stamps_are_dropped_counted_and_named') == \
        'passed', output[-3000:]
    # test_flight_failure.py: skipped as a module (one entry), the rest of the session ran.
    assert list(outcomes.values()).count('skipped') == 1, outcomes
