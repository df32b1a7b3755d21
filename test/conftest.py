"""Shared fixtures: free UDP ports, running links and SITL peers on loopback."""

import contextlib
import os
import random
import socket
import subprocess
from typing import Iterator, List

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


def free_udp_port() -> int:
    """Return a UDP port nothing on loopback holds right now."""
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


@pytest.fixture
def make_link() -> Iterator:
    """
    Make of started links (with their states) that are stopped after the test.

    Links serve one sample per frame unless state_settings say otherwise, so tests of the
    session logic control every timestamp.
    """
    links: List[SitlLink] = []

    def make(state_settings: StateSettings = StateSettings(pacing=SAMPLES), on_frame=None,
             logger=None,
             **link_settings) -> SitlLink:
        link_settings.setdefault('port', free_udp_port())
        link_settings.setdefault('fresh_timeout', 0.2)
        link = SitlLink(LinkSettings(**link_settings), SensorState(state_settings), on_frame,
                        logger)
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
