"""
SITL on another host: the engine and the node answer SITL at its own address (issue 33).

Each test makes hosts of network namespaces (netns_hosts: addresses on 10.231.0.0/24 inside
them only, unique names, deleted at the end whatever happens). SITL runs on one host with
`--model JSON:<the bridge's address>`; the lock-step engine (`ardupilot-json-bridge mujoco
--bind`) or mujoco_sim with the node (its bind_address parameter) on another. Skips with one
line without root and `ip netns`, and the flights without real SITL (ARDUPILOT_SITL_DIR).
"""

import os
import subprocess
import sys
from typing import Iterator, List

import pytest

from ardupilot_json_bridge.core.settings import sitl_port
from conftest import reaped
import netns_hosts
import sitl_flight
from sitl_peer import parse_reply, SitlPeer

NETNS_MISSING = netns_hosts.missing()
pytestmark = pytest.mark.skipif(NETNS_MISSING is not None, reason=str(NETNS_MISSING))
needs_sitl = pytest.mark.skipif(
    sitl_flight.sitl_binary() is None,
    reason=f'real ArduCopter: set {sitl_flight.SITL_DIR_VARIABLE} to a folder with arducopter')
CONFIG = os.path.join(os.path.dirname(__file__), '..', 'config', 'mujoco_quad_x.yaml')
HEIGHT = 5.0
HOLD = 5.0


@pytest.fixture
def network(request) -> Iterator[netns_hosts.Network]:
    """Three hosts, sitl, bridge and ros; the namespaces go when the test ends, however."""
    made = netns_hosts.Network(['sitl', 'bridge', 'ros'])
    request.addfinalizer(made.close)
    yield made


def bridge_command(host: netns_hosts.Host, *arguments: str) -> List[str]:
    return host.command(sys.executable, '-m', 'ardupilot_json_bridge.cli', *arguments)


def started(command: List[str]) -> subprocess.Popen:
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=dict(os.environ, PYTHONUNBUFFERED='1'))


def check_hover(record: sitl_flight.FlightRecord, log: str, bridge_output: str) -> None:
    """Assert that SITL took off, hovered HOLD s within 0.5 m of HEIGHT and landed."""
    tail = sitl_flight.tail
    assert record.armed and record.reached, (
        f'SITL said {record.texts[-15:]}\nbridge: {tail(bridge_output)}\nSITL: {tail(log)}')
    assert record.sim_seconds >= HOLD
    assert record.worst_hover_error(HEIGHT) < 0.5, record.hover[-5:]
    assert record.landed, record.texts[-15:]


def peer_on(host: netns_hosts.Host, bridge: netns_hosts.Host, instance: int) -> SitlPeer:
    """Return a SITL stand-in on host, sending from its own address to the bridge's SITL port."""
    def made() -> SitlPeer:
        peer = SitlPeer(sitl_port(instance), host.address)   # bound to its own address
        peer.target = (bridge.address, sitl_port(instance))
        return peer

    return netns_hosts.on_host(host, made)


def test_the_network_has_its_addresses_inside_its_namespaces_only(network):
    outside = subprocess.run(['ip', '-o', 'addr'], capture_output=True, text=True).stdout
    assert netns_hosts.SUBNET not in outside
    for host in network.hosts.values():
        inside = subprocess.run(host.command('ip', '-o', 'addr'), capture_output=True,
                                text=True).stdout
        assert f'inet {host.address}/24' in inside, inside


def test_the_engine_bound_to_its_host_answers_sitl_at_sitls_own_address_and_port(network):
    sitl, bridge = network['sitl'], network['bridge']
    instance = 7
    with reaped(started(bridge_command(bridge, 'mujoco', '--instance', str(instance),
                                       '--bind', bridge.address))) as engine:
        peer = peer_on(sitl, bridge, instance)
        try:
            replies = peer.lock_step(20, timeout=30.0)
            sender = peer.address
        finally:
            peer.close()
        output = sitl_flight.stopped(engine)
    assert len(replies) == 20, output
    # Each reply came from the engine's address to the peer's own (receive() keeps only those)
    # and stepped physics: 20 frames at 1200 Hz.
    assert replies[-1]['timestamp'] - replies[0]['timestamp'] == pytest.approx(19 / 1200)
    assert f'peer {sitl.address}:{sender[1]}' in output, output


def test_the_engine_on_its_default_address_is_not_reached_from_another_host(network):
    sitl, bridge = network['sitl'], network['bridge']
    instance = 7
    with reaped(started(bridge_command(bridge, 'mujoco', '--instance',
                                       str(instance)))) as engine:
        peer = peer_on(sitl, bridge, instance)
        try:
            peer.send()
            reply = peer.receive(3.0)
        finally:
            peer.close()
        output = sitl_flight.stopped(engine)
    assert reply is None, parse_reply(reply)
    assert 'received 0' in output, output


@needs_sitl
def test_real_arducopter_on_another_host_hovers_on_the_lock_step_engine(network):
    sitl_host, bridge = network['sitl'], network['bridge']
    instance = sitl_flight.instance(7)
    with reaped(started(bridge_command(bridge, 'mujoco', '--instance', str(instance),
                                       '--bind', bridge.address))) as engine:
        with sitl_flight.Sitl(instance=instance, backend=bridge.address,
                              prefix=sitl_host.command()) as sitl:
            record = sitl_flight.fly(
                sitl, HEIGHT, HOLD, lambda: 0.0,
                connect=lambda s: netns_hosts.on_host(sitl_host, lambda: sitl_flight.Flight(s)))
            log = sitl.log()
        output = sitl_flight.stopped(engine)
    tail = sitl_flight.tail
    check_hover(record, log, output)
    assert f'peer {sitl_host.address}:' in output, tail(output)
    assert 'Traceback' not in output, tail(output)
    print(f'\nSITL on {sitl_host.address}, engine on {bridge.address}: hover error '
          f'{record.worst_hover_error(HEIGHT):.3f} m over {record.sim_seconds:.1f} s, '
          f'{record.wall_seconds:.0f} s wall')


@needs_sitl
def test_real_arducopter_on_another_host_hovers_on_the_node(network):
    pytest.importorskip('rclpy', reason="needs ROS 2 (rclpy): pip install '.[jazzy]'")
    pytest.importorskip('mujoco', reason='needs the mujoco package')
    sitl_host, ros = network['sitl'], network['ros']
    instance = sitl_flight.instance(8)
    namespace = ['--ros-args', '-r', '__ns:=/remote']
    with reaped(started(bridge_command(ros, 'mujoco-sim', *namespace,
                                       '-p', sitl_flight.PACED))) as sim, \
            reaped(started(bridge_command(ros, 'node', *namespace, '--params-file', CONFIG,
                                          '-p', 'use_sim_time:=true', '-p',
                                          f'instance:={instance}', '-p',
                                          f'bind_address:={ros.address}'))) as node:
        with sitl_flight.Sitl(instance=instance, backend=ros.address,
                              prefix=sitl_host.command()) as sitl:
            record = sitl_flight.fly(
                sitl, HEIGHT, HOLD, lambda: 0.0,
                timeout=sitl_flight.FLIGHT_TIMEOUT / sitl_flight.REAL_TIME_FACTOR,
                connect=lambda s: netns_hosts.on_host(sitl_host, lambda: sitl_flight.Flight(s)))
            log = sitl.log()
        node_output = sitl_flight.stopped(node)
        sim_output = sitl_flight.stopped(sim)
    tail = sitl_flight.tail
    check_hover(record, log, node_output)
    assert f'listening on UDP {ros.address}:{sitl_port(instance)}' in node_output, \
        tail(node_output)
    assert f'SITL connected from {sitl_host.address}:' in node_output, tail(node_output)
    assert 'Traceback' not in node_output + sim_output, tail(node_output + sim_output)
    print(f'\nSITL on {sitl_host.address}, mujoco_sim and the node on {ros.address}: hover '
          f'error {record.worst_hover_error(HEIGHT):.3f} m over {record.sim_seconds:.1f} s, '
          f'{record.wall_seconds:.0f} s wall')
