"""
A fleet across three hosts over ROS 2's own transport (issue 33).

mujoco_sim (two quads in one world) on one host, a bridge node per vehicle on a second, their
two SITLs on a third: hosts made of network namespaces (netns_hosts), ROS 2 between them by
the sourced Jazzy's Cyclone DDS, configured for the test network's interface only (unicast
discovery among the three hosts' addresses). Two real ArduCopters take off and hover at once.
Skips with one line without root and `ip netns`, without real SITL, or where ROS 2 is not a
sourced one on Cyclone DDS (source /opt/ros/jazzy/activate.sh).
"""

import os
import subprocess
import sys
import threading
from typing import Dict, List

import pytest

from conftest import reaped
import netns_hosts
import sitl_flight

NETNS_MISSING = netns_hosts.missing()
CYCLONE = 'rmw_cyclonedds_cpp'
CONFIG = os.path.join(os.path.dirname(__file__), '..', 'config', 'mujoco_quad_x.yaml')
HEIGHTS = [3.0, 4.0]
HOLD = 5.0
pytestmark = [
    pytest.mark.skipif(NETNS_MISSING is not None, reason=str(NETNS_MISSING)),
    pytest.mark.skipif(sitl_flight.sitl_binary() is None,
                       reason=f'real ArduCopter: set {sitl_flight.SITL_DIR_VARIABLE}'),
    pytest.mark.skipif(os.environ.get('RMW_IMPLEMENTATION') != CYCLONE,
                       reason='needs a sourced ROS 2 on Cyclone DDS (source '
                              '/opt/ros/jazzy/activate.sh)'),
]


def cyclone_config(hosts: List[netns_hosts.Host]) -> str:
    """Cyclone DDS on each host's test interface only, discovering the hosts by unicast."""
    peers = ''.join(f'<Peer Address="{host.address}"/>' for host in hosts)
    return ('<CycloneDDS xmlns="https://cdds.io/config"><Domain Id="any"><General>'
            f'<Interfaces><NetworkInterface name="{hosts[0].interface}"/></Interfaces>'
            '<AllowMulticast>false</AllowMulticast></General><Discovery>'
            '<ParticipantIndex>auto</ParticipantIndex>'
            '<MaxAutoParticipantIndex>20</MaxAutoParticipantIndex>'
            f'<Peers>{peers}</Peers></Discovery></Domain></CycloneDDS>')


def test_two_real_arducopters_hover_with_simulator_bridges_and_sitls_on_three_hosts(
        request, tmp_path):
    pytest.importorskip('rclpy', reason='needs ROS 2 (rclpy)')
    pytest.importorskip('mujoco', reason='needs the mujoco package')
    network = netns_hosts.Network(['sim', 'bridge', 'sitl'])
    request.addfinalizer(network.close)
    sim_host, bridge, sitl_host = network['sim'], network['bridge'], network['sitl']
    config = tmp_path / 'cyclonedds.xml'
    config.write_text(cyclone_config(list(network.hosts.values())))
    # What a user sets on every host: the DDS configuration, and discovery beyond localhost.
    environment = dict(os.environ, CYCLONEDDS_URI=f'file://{config}',
                       ROS_AUTOMATIC_DISCOVERY_RANGE='SUBNET', PYTHONUNBUFFERED='1')
    instances = [sitl_flight.instance(11 + k) for k in range(len(HEIGHTS))]

    def start(host: netns_hosts.Host, *arguments: str) -> subprocess.Popen:
        return subprocess.Popen(host.command(sys.executable, '-m', 'ardupilot_json_bridge.cli',
                                             *arguments),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=environment)

    records: Dict[int, sitl_flight.FlightRecord] = {}
    failures: Dict[int, BaseException] = {}
    with reaped(start(sim_host, 'mujoco-sim', '--ros-args', '-p', 'vehicles:=2',
                      '-p', sitl_flight.PACED)) as sim:
        nodes = [start(bridge, 'node', '--ros-args', '-r', f'__ns:=/vehicle{k}',
                       '--params-file', CONFIG, '-p', 'use_sim_time:=true',
                       '-p', f'instance:={instance}', '-p', f'bind_address:={bridge.address}')
                 for k, instance in enumerate(instances)]
        try:
            with sitl_flight.Sitl(instance=instances[0], backend=bridge.address,
                                  prefix=sitl_host.command()) as first, \
                    sitl_flight.Sitl(instance=instances[1], backend=bridge.address,
                                     prefix=sitl_host.command()) as second:

                def fly(index: int, sitl: sitl_flight.Sitl) -> None:
                    try:
                        records[index] = sitl_flight.fly(
                            sitl, HEIGHTS[index], HOLD, lambda: 0.0,
                            timeout=sitl_flight.FLIGHT_TIMEOUT / sitl_flight.REAL_TIME_FACTOR,
                            connect=lambda s: netns_hosts.on_host(
                                sitl_host, lambda: sitl_flight.Flight(s)))
                    except BaseException as error:   # reported by the test's thread
                        failures[index] = error

                pilots = [threading.Thread(target=fly, args=(k, sitl))
                          for k, sitl in enumerate((first, second))]
                for pilot in pilots:
                    pilot.start()
                for pilot in pilots:
                    pilot.join()
                logs = [first.log(), second.log()]
        finally:
            outputs = []
            for node in nodes:
                node.terminate()
                outputs.append(node.communicate(timeout=20)[0])
        sim.terminate()
        sim_output = sim.communicate(timeout=20)[0]
    tail = sitl_flight.tail
    assert not failures, failures
    for index, height in enumerate(HEIGHTS):
        record = records[index]
        assert record.armed and record.reached, (
            f'vehicle {index}: SITL said {record.texts[-15:]}\nnode: {tail(outputs[index])}\n'
            f'simulator: {tail(sim_output)}\nSITL: {tail(logs[index])}')
        assert record.sim_seconds >= HOLD
        assert record.worst_hover_error(height) < 0.5, record.hover[-5:]
        assert record.landed, record.texts[-15:]
        assert f'SITL connected from {sitl_host.address}:' in outputs[index], \
            tail(outputs[index])
        print(f'\nvehicle {index}: SITL on {sitl_host.address}, node on {bridge.address}, '
              f'mujoco_sim on {sim_host.address}: hover error '
              f'{record.worst_hover_error(height):.3f} m over {record.sim_seconds:.1f} s')
    assert 'Traceback' not in ''.join(outputs) + sim_output
