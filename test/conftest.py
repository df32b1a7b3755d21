"""Shared fixtures: free UDP ports, running links and SITL peers on loopback."""

import contextlib
import logging
import os
import pathlib
import random
import socket
import subprocess
import time
from typing import Iterator, List, Optional, Set, Tuple

import pytest

from ardupilot_json_bridge.core.settings import LinkSettings, SAMPLES, StateSettings
from ardupilot_json_bridge.core.state import SensorState
from ardupilot_json_bridge.link.sitl_link import SitlLink
from ros2_tools import ros2_missing
from sitl_peer import SitlPeer

# One ROS domain per test run, inherited by every node a test starts, so two runs on one
# machine (a developer's and CI's) do not hear each other: the one .ci/run sets, else random.
os.environ.setdefault('ROS_DOMAIN_ID', str(random.randint(1, 101)))
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')


# ROS 2's launch_testing pytest plugin (loaded by plain `pytest`, as `colcon test` runs it)
# imports every test module to look for launch tests, outside pytest's own collection: one
# module's import skip (pytest.importorskip: pymavlink, mujoco, rclpy) then skipped the whole
# session, and an import error failed it. The project has no launch tests: its modules are
# collected as pytest collects them, so a module's skip skips that module only.
def plain_module(parent: pytest.Collector, name: str, **path: object) -> Optional[pytest.Module]:
    """Collect a test module as pytest does, before launch_testing's hook imports it."""
    return None if name == '__init__.py' else pytest.Module.from_parent(parent, **path)


if int(pytest.__version__.split('.')[0]) >= 7:
    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makemodule(module_path: pathlib.Path,
                                    parent: pytest.Collector) -> Optional[pytest.Module]:
        return plain_module(parent, module_path.name, path=module_path)
else:  # pytest 6 (Ubuntu 22.04's 6.2.5, Humble's): py.path only
    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makemodule(path: os.PathLike,
                                    parent: pytest.Collector) -> Optional[pytest.Module]:
        return plain_module(parent, path.basename, fspath=path)


def standard_loggers() -> None:
    """
    Make loggers created from now on the standard library's, which propagate to the root.

    launch (imported when pytest starts by ROS 2's launch_testing plugin, which plain `pytest`
    and `colcon test` load, or by a test) sets a process-wide logger class whose loggers never
    propagate: the project's and the tests' loggers then never reach caplog's handler on the
    root logger. The project's own processes (node, CLI) do not import launch.
    """
    logging.setLoggerClass(logging.Logger)


standard_loggers()


@pytest.fixture(autouse=True)
def _standard_loggers() -> None:
    """Undo, before each test, a launch imported by an earlier test (see standard_loggers)."""
    standard_loggers()


_DDS_PORT_BASE = 7400   # RTPS port base; each ROS domain takes the 250 ports after its own
_DDS_DOMAIN_GAIN = 250
_FIRST_TEST_PORT = 10000   # above SITL's own 5760 + 10 N and 9002 + 10 N of the first instances
_handed_out: Set[int] = set()
_port_choice = random.Random()


def _ephemeral_ports() -> Tuple[int, int]:
    """Return the kernel's range for ports bound to 0 (Linux's default where it cannot be read)."""
    try:
        with open('/proc/sys/net/ipv4/ip_local_port_range') as ports:
            low, high = (int(word) for word in ports.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_udp_port() -> int:
    """
    Return a UDP port nothing on loopback holds right now, and nothing will take by chance.

    A port the kernel picks for a bind to 0 is free only until the next bind to 0: this
    process's own SITL peer or DDS sockets may be handed it before the link binds it. So
    the port comes from below the kernel's ephemeral range, outside this ROS domain's DDS
    ports, and is never handed out twice in one test run.
    """
    low = _FIRST_TEST_PORT
    high = _ephemeral_ports()[0] - 1
    dds_first = _DDS_PORT_BASE + _DDS_DOMAIN_GAIN * int(os.environ['ROS_DOMAIN_ID'])
    dds_ports = range(dds_first, dds_first + _DDS_DOMAIN_GAIN)
    for _ in range(200 if high - low > 1000 else 0):
        port = _port_choice.randint(low, high)
        if port in _handed_out or port in dds_ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                sock.bind(('127.0.0.1', port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def motor_command(pwm: float) -> float:
    """Return the quad X presets' rotor command, by hand: 1100-1900 us to 0-838 rad/s."""
    return (pwm - 1100.0) / 800.0 * 838.0


@pytest.fixture
def patient_config(tmp_path) -> str:
    """
    Return a parameters file letting a test's SITL peer lag a real-time source by up to 10 s.

    On a busy 2-core machine the peer can fall more than the default 50 ms behind; the grid
    would then rightly skip ahead, and tests of exact frame steps would see that jump.
    """
    path = tmp_path / 'patient.yaml'
    path.write_text('/**:\n  ros__parameters:\n    max_backlog: 10.0\n')
    return str(path)


class SkippingClock:
    """The monotonic clock, moved on by skip(): a link's wait for SITL's resend, in no time."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def skip(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
def make_link() -> Iterator:
    """
    Make of started links (with their states) that are stopped after the test.

    Links serve one sample per frame unless state_settings say otherwise, so tests of the
    session logic control every timestamp.
    """
    links: List[SitlLink] = []

    def make(state_settings: StateSettings = StateSettings(pacing=SAMPLES), on_frame=None,
             logger=None, clock=time.monotonic,
             **link_settings) -> SitlLink:
        link_settings.setdefault('port', free_udp_port())
        link_settings.setdefault('fresh_timeout', 0.2)
        link = SitlLink(LinkSettings(**link_settings), SensorState(state_settings), on_frame,
                        logger, clock=clock)
        link.start()
        links.append(link)
        return link

    yield make
    for link in links:
        link.stop()


@pytest.fixture
def make_peer() -> Iterator:
    """Make of SITL peers aimed at a port, closed after the test."""
    peers: List[SitlPeer] = []

    def make(port: int, channels: int = 16) -> SitlPeer:
        peer = SitlPeer(port, channels=channels)
        peers.append(peer)
        return peer

    yield make
    for peer in peers:
        peer.close()


def inner_pytest_environment(*python_path: str) -> dict:
    """
    Return the environment for a pytest run inside a test, with python_path first.

    Without the outer run's PYTEST_ADDOPTS: `colcon test` passes its options there (the
    suite's paths, its junit file), so an inner pytest ran the whole suite again.
    """
    environment = dict(os.environ)
    environment.pop('PYTEST_ADDOPTS', None)
    environment['PYTHONPATH'] = os.pathsep.join(
        [*python_path, *filter(None, [environment.get('PYTHONPATH')])])
    return environment


@contextlib.contextmanager
def reaped(process: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """Kill the subprocess on the way out if it still runs, even when the test fails."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.fixture(scope='session')
def sourced_ros2() -> None:
    """
    Skip (once, one line) where ROS 2 is not sourced with this checkout built by colcon.

    The tests in test/ros2 run the ros2 command line; elsewhere they cannot.
    """
    reason = ros2_missing()
    if reason:
        pytest.skip(reason)
    os.environ.setdefault('ROS_DOMAIN_ID', str(random.randrange(1, 100)))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
