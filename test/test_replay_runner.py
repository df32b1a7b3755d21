"""The standalone runner end to end: a bag on disk, the CLI in a subprocess, the SITL peer."""

import contextlib
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from ardupilot_json_bridge.core.frames import quaternion_to_euler
from ardupilot_json_bridge.sources.sample_bag import SteadyMotion, write_motion_bag
from conftest import free_udp_port, reaped
import ros_messages
import ros_motion
from sitl_peer import parse_reply, SitlPeer

MOTION = SteadyMotion(position=(10.0, 20.0, 5.0), velocity=(1.0, 2.0, 0.5), yaw=0.3,
                      yaw_rate=0.1)
START = 100.0


def runner(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, '-m', 'ardupilot_json_bridge.cli', 'replay',
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def run():
    """Start the runner with arguments; every runner is reaped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda *args: stack.enter_context(reaped(runner(*args)))


def first_reply(peer: SitlPeer, process: subprocess.Popen, attempts: int = 100) -> dict:
    """Send frame 0 until the runner is up and answers, as SITL resends."""
    for _ in range(attempts):
        peer.send(frame_count=0)
        datagram = peer.receive(0.1)
        if datagram is not None:
            peer.frame_count = 1
            return parse_reply(datagram)
        assert process.poll() is None, process.communicate()
    raise AssertionError('the runner never answered')


def expected(timestamp: float) -> dict:
    east, north, up = (MOTION.position[i] + MOTION.velocity[i] * timestamp for i in range(3))
    return {'position': (north, east, -up),
            'velocity': (MOTION.velocity[1], MOTION.velocity[0], -MOTION.velocity[2]),
            'yaw': math.pi / 2 - (MOTION.yaw + MOTION.yaw_rate * timestamp)}


def lock_step_replay(run, bag: str, *args: str):
    """Replay a bag with --rate 0 to the end, as SITL asks: (replies, stdout, stderr)."""
    port = free_udp_port()
    process = run(bag, '--rate', '0', '--port', str(port), *args)
    peer = SitlPeer(port)
    try:
        replies = [first_reply(peer, process)]
        while True:
            try:
                replies.append(peer.step(timeout=1.0))
            except TimeoutError:
                break
    finally:
        peer.close()
        output, errors = process.communicate(timeout=20)
    assert process.returncode == 0, errors
    return replies, output, errors


@pytest.mark.parametrize('storage,distribution', [('sqlite3', 'humble'), ('mcap', 'jazzy')])
def test_runner_serves_a_bag_in_ned_frd(run, tmp_path, storage, distribution):
    bag = str(tmp_path / 'moving')
    write_motion_bag(bag, MOTION, duration=1.0, imu_rate=400.0, odometry_rate=50.0,
                     namespace='uav1', start=START, storage=storage,
                     distribution=distribution)
    replies, output, errors = lock_step_replay(run, bag, '--namespace', 'uav1')
    assert len(replies) == 400
    assert [r['timestamp'] for r in replies[:3]] == pytest.approx([0.0, 0.0025, 0.005])
    for reply in replies:
        want = expected(reply['timestamp'])
        assert reply['position'] == pytest.approx(want['position'], abs=1e-5)
        assert reply['velocity'] == pytest.approx(want['velocity'], abs=1e-5)
        assert reply['imu.gyro'] == pytest.approx((0.0, 0.0, -MOTION.yaw_rate), abs=1e-6)
        assert reply['imu.accel_body'] == pytest.approx((0.0, 0.0, -9.80665), abs=1e-6)
        roll, pitch, yaw = quaternion_to_euler(reply['quaternion'])
        assert (roll, pitch) == pytest.approx((0.0, 0.0), abs=1e-6)
        assert math.remainder(yaw - want['yaw'], math.tau) == pytest.approx(0.0, abs=1e-5)
    assert 'replied 400' in output
    assert 'SITL connected' in errors


@pytest.mark.parametrize('imu_first, odometry_delay, odometry_rate', [
    (True, 0.0, 50.0), (False, 0.0, 50.0), (True, 0.005, 50.0), (True, 0.0, 400.0),
    (False, 0.012, 400.0)])
def test_lock_step_replay_serves_every_sample_once_in_any_topic_order(
        run, tmp_path, imu_first, odometry_delay, odometry_rate):
    bag = str(tmp_path / 'ordered')
    write_motion_bag(bag, MOTION, duration=0.5, imu_rate=400.0, odometry_rate=odometry_rate,
                     start=START, imu_first=imu_first, odometry_delay=odometry_delay)
    replies, _, errors = lock_step_replay(run, bag)
    # One reply per IMU sample, each 2.5 ms after the last, each at its own instant.
    assert len(replies) == 200, errors
    steps = [b['timestamp'] - a['timestamp'] for a, b in zip(replies, replies[1:])]
    assert steps == pytest.approx([0.0025] * 199, abs=1e-6)
    first_yaw = quaternion_to_euler(replies[0]['quaternion'])[2]
    for reply in replies:
        yaw = quaternion_to_euler(reply['quaternion'])[2]
        turned = first_yaw - MOTION.yaw_rate * reply['timestamp']
        assert math.remainder(yaw - turned, math.tau) == pytest.approx(0.0, abs=1e-6)


def test_replay_at_a_rate_serves_sitls_grid(run, tmp_path, patient_config):
    bag = str(tmp_path / 'slow')
    write_motion_bag(bag, MOTION, duration=1.5, imu_rate=250.0, odometry_rate=50.0,
                     start=START)
    port = free_udp_port()
    process = run(bag, '--rate', '1', '--port', str(port), '--config', patient_config)
    peer = SitlPeer(port)
    try:
        replies = [first_reply(peer, process)]
        for _ in range(600):
            replies.append(peer.step(timeout=1.0))
    finally:
        peer.close()
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=20)
    # A 250 Hz recording, answered on SITL's 1200 Hz grid.
    steps = [b['timestamp'] - a['timestamp'] for a, b in zip(replies, replies[1:])]
    assert steps == pytest.approx([1 / 1200] * 600, abs=1e-9)
    first = replies[0]
    for reply in replies:
        moved = [b - a for a, b in zip(first['position'], reply['position'])]
        want = (MOTION.velocity[1] * reply['timestamp'], MOTION.velocity[0] * reply['timestamp'],
                -MOTION.velocity[2] * reply['timestamp'])
        assert moved == pytest.approx(want, abs=1e-6)


def test_a_long_bag_is_answered_at_once(run, tmp_path):
    bag = str(tmp_path / 'long')
    write_motion_bag(bag, MOTION, duration=30.0, imu_rate=1000.0, odometry_rate=50.0,
                     storage='mcap', distribution='jazzy')
    port = free_udp_port()
    started = time.monotonic()
    process = run(bag, '--rate', '0', '--port', str(port))
    peer = SitlPeer(port)
    try:
        first_reply(peer, process, attempts=300)
        answered = time.monotonic() - started
        for _ in range(100):
            peer.step()
    finally:
        peer.close()
        process.send_signal(signal.SIGINT)
        output, errors = process.communicate(timeout=20)
    # Streaming: the first reply does not wait for 31 500 messages to be read.
    assert answered < 3.0, answered
    assert 'replied 101' in output, errors


def test_runner_without_a_bag_serves_the_sample_until_stopped(run):
    port = free_udp_port()
    process = run('--port', str(port), '--rate', '0')
    peer = SitlPeer(port)
    try:
        reply = first_reply(peer, process)
        for _ in range(50):
            reply = peer.step()
        assert reply['position'] == pytest.approx((0.0, 0.0, 0.0))
        assert reply['imu.accel_body'] == pytest.approx((0.0, 0.0, -9.80665))
        assert quaternion_to_euler(reply['quaternion'])[2] == pytest.approx(0.0, abs=1e-9)
        time.sleep(0.1)
        assert process.poll() is None
        process.send_signal(signal.SIGINT)
        output, errors = process.communicate(timeout=10)
    finally:
        peer.close()
    assert process.returncode == 0
    assert 'replied 51' in output


def test_lock_step_replay_names_a_convention_fault_with_its_fix(run, tmp_path):
    bag = tmp_path / 'frd_imu'
    ros_messages.write_stream_bag(bag, ros_motion.Stream(faults=('frd_imu',), seconds=5.0))
    replies, output, errors = lock_step_replay(run, str(bag), '--namespace', 'uav1')
    assert len(replies) == 5000, errors
    assert ('conventions: imu mounting is wrong' in errors
            and 'fix: imu_mounting_rpy: [180.0, 0.0, 0.0]' in errors), errors
    table = output.split('conventions, over the last')[1]
    assert [line.split('  ')[0] for line in table.splitlines() if '  wrong  ' in line] \
        == ['imu mounting'], table


@pytest.mark.parametrize('stamp_offset, verdict', [(0.0, 'ok'), (1.7e9, 'wrong')])
def test_a_replay_judges_the_stamps_against_the_bags_clock(run, tmp_path, stamp_offset,
                                                           verdict):
    bag = tmp_path / 'stamps'
    ros_messages.write_stream_bag(bag, ros_motion.Stream(seconds=3.0), stamp_offset=stamp_offset)
    replies, output, errors = lock_step_replay(run, str(bag), '--namespace', 'uav1')
    assert len(replies) == 3000, errors
    table = output.split('conventions, over the last')[1]
    (line,) = [line for line in table.splitlines()
               if line.startswith('time: stamps against the clock')]
    assert line.split()[5] == verdict, table
    if verdict == 'wrong':
        assert 'wall-clock time while the clock is simulated' in line, line


def test_a_looping_replay_starts_its_checks_over_each_loop(run):
    port = free_udp_port()
    process = run('--port', str(port), '--rate', '0')  # the 2 s sample bag, looping
    peer = SitlPeer(port)
    try:
        first_reply(peer, process)
        for _ in range(3000):
            peer.step()
        process.send_signal(signal.SIGINT)
        output, errors = process.communicate(timeout=10)
    finally:
        peer.close()
    table = output.split('conventions, over the last')[1]
    assert 'time: imu stamps' in table and 'wrong' not in table, table


def test_runner_explains_a_bag_without_the_topics(run, tmp_path):
    bag = str(tmp_path / 'other')
    write_motion_bag(bag, MOTION, duration=0.1, namespace='uav7')
    process = run(bag, '--port', str(free_udp_port()))
    _, errors = process.communicate(timeout=20)
    assert process.returncode == 2
    assert 'has no /odom (nav_msgs/msg/Odometry)' in errors
    assert '/uav7/odom' in errors and '--namespace' in errors


def test_runner_explains_a_port_in_use(run):
    port = free_udp_port()
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        holder.bind(('127.0.0.1', port))
        process = run('--port', str(port))
        _, errors = process.communicate(timeout=20)
    assert process.returncode == 1
    assert f'UDP port {port}' in errors and 'already in use' in errors


def test_runner_reads_the_node_presets(run, tmp_path):
    bag = str(tmp_path / 'quad')
    write_motion_bag(bag, MOTION, duration=0.2, start=START)
    preset = os.path.join(os.path.dirname(__file__), '..', 'config', 'quad_x.yaml')
    port = free_udp_port()
    process = run(bag, '--config', preset, '--rate', '0', '--port', str(port))
    peer = SitlPeer(port)
    try:
        first_reply(peer, process)
        for _ in range(10):
            peer.step(pwm=[1500] * 4 + [0] * 12)
        process.send_signal(signal.SIGINT)
    finally:
        peer.close()
        output, errors = process.communicate(timeout=20)
    assert process.returncode == 0, errors
    assert 'replied 11' in output
