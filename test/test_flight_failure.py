"""
A flight test whose SITL dies fails in a few lines, as pytest prints it, not in megabytes.

A stand-in SITL speaks just enough MAVLink (heartbeats) for sitl_flight.fly to start, then
kills itself with SIGKILL, as SITL aborting mid-flight does. The failing flight runs in a pytest
of its own, and its whole output is judged: in CI, pymavlink once printed "EOF on TCP socket"
in a tight loop for such a test, a 633 MB log.
"""

import os
import subprocess
import sys

import pytest

pytest.importorskip('pymavlink', reason="needs pymavlink (pip install '.[test]')")

from conftest import inner_pytest_environment  # noqa: E402

TEST_DIR = os.path.dirname(os.path.abspath(__file__))
# The output of pytest -q for the failing flight below stays under this many lines.
MOST_LINES = 120

DYING_SITL = """
import os, signal, socket, sys, time
from pymavlink.dialects.v20 import ardupilotmega as mavlink
server = socket.create_server(('127.0.0.1', int(sys.argv[1])))
connection, _ = server.accept()
mav = mavlink.MAVLink(None, srcSystem=1, srcComponent=1)
for k in range(20):
    connection.sendall(mav.heartbeat_encode(
        mavlink.MAV_TYPE_QUADROTOR, mavlink.MAV_AUTOPILOT_ARDUPILOTMEGA, 0, 0,
        mavlink.MAV_STATE_STANDBY).pack(mav))
    print(f'stand-in SITL: heartbeat {k}', flush=True)
    time.sleep(0.05)
connection.setblocking(False)
try:
    while connection.recv(4096):      # read what the flight sent: the end is an EOF, not a reset
        pass
except BlockingIOError:
    pass
print('stand-in SITL: aborting', flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""

FAILING_FLIGHT = f"""
import socket
import sys
import tempfile

import sitl_flight

DYING_SITL = {DYING_SITL!r}


class DyingSitl(sitl_flight.Sitl):
    def __init__(self):
        with socket.socket() as probe:
            probe.bind(('127.0.0.1', 0))
            port = probe.getsockname()[1]
        self._start(tempfile.mkdtemp(prefix='sitl-dying-'),
                    [sys.executable, '-c', DYING_SITL, str(port)], port)


def test_a_flight_whose_sitl_dies():
    with DyingSitl() as sitl:
        record = sitl_flight.fly(sitl, 5.0, 5.0, lambda: 0.0, timeout=60.0)
    assert record.landed
"""


def test_a_flight_whose_sitl_dies_fails_in_a_few_lines_naming_how(tmp_path):
    test = tmp_path / 'test_failing_flight.py'
    test.write_text(FAILING_FLIGHT)
    environment = inner_pytest_environment(TEST_DIR)
    try:
        run = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                              str(test)], cwd=str(tmp_path), env=environment,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    except subprocess.TimeoutExpired as expired:
        output = (expired.output or b'').decode(errors='replace')
        pytest.fail(f'the failing flight did not end in 120 s; {len(output)} characters, '
                    f'ending:\n{output[-1500:]}')
    output = run.stdout.decode(errors='replace')
    lines = output.splitlines()
    assert run.returncode == 1, output[-3000:]
    assert len(lines) < MOST_LINES, f'{len(lines)} lines; the last:\n' + '\n'.join(lines[-40:])
    assert 'EOF on TCP socket' not in output, output[-3000:]
    # SitlDied names SITL's end and its last output.
    assert 'SitlDied: SITL ' in output and 'exited with status -9 (SIGKILL)' in output, \
        output[-3000:]
    assert 'stand-in SITL: aborting' in output, output[-3000:]
    assert '1 failed' in lines[-1], lines[-1]
