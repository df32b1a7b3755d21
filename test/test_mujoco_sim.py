"""mujoco_sim as users start it: it publishes, and SIGTERM or SIGINT end it cleanly."""

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip('rclpy', reason='needs ROS 2 (rclpy): source ROS or pip install '
                                    "'.[jazzy]'")
pytest.importorskip('mujoco', reason='needs the mujoco package')


@pytest.mark.parametrize('signal_number', [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_simulator_cleanly_at_any_moment(signal_number):
    # PYTHONFAULTHANDLER: a hang is aborted below with every thread's stack in the output.
    environment = dict(os.environ, ROS_DOMAIN_ID='93', ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
                       PYTHONFAULTHANDLER='1')
    # The physics thread publishes every millisecond: stop it at several moments, since a
    # signal that lands mid-publish once left a traceback behind.
    for attempt in range(4):
        process = subprocess.Popen(
            [sys.executable, '-m', 'ardupilot_json_bridge.cli', 'mujoco-sim', '--ros-args',
             '-r', '__ns:=/stop'],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
        time.sleep(1.5 + 0.17 * attempt)
        process.send_signal(signal_number)
        try:
            output, _ = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            output, _ = process.communicate()
            pytest.fail(f'still running 15 s after {signal_number!r} (attempt {attempt}); '
                        f'its threads:\n{output}')
        assert process.returncode == 0, output
        assert 'Traceback' not in output, output
        assert 'physics and IMU at 1000 Hz' in output
