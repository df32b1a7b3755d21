"""The standalone runner end to end: a bag on disk, the CLI in a subprocess, the SITL peer."""

import collections
import contextlib
from dataclasses import replace
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import yaml

from ardupilot_json_bridge.config import config_from_parameters
from ardupilot_json_bridge.core.frames import quaternion_to_euler
from ardupilot_json_bridge.core.settings import SAMPLES
from ardupilot_json_bridge.core.state import SensorState
from ardupilot_json_bridge.messages.routes import input_routes
from ardupilot_json_bridge.sources import bagfile, replay as replay_module
from ardupilot_json_bridge.sources.bagfile import write_bag
from ardupilot_json_bridge.sources.sample_bag import SteadyMotion, write_motion_bag
from conftest import free_udp_port, reaped
import ros_messages
import ros_motion
from sitl_peer import parse_reply, SitlPeer

MOTION = SteadyMotion(position=(10.0, 20.0, 5.0), velocity=(1.0, 2.0, 0.5), yaw=0.3,
                      yaw_rate=0.1)
START = 100.0
# When a recorder without --use-sim-time began logging (wall clock, s).
WALL_START = 1.7e9
EAST_SPEED = 2.0


def write_wall_clock_bag(path: str, factor: float, seconds: float, imu_rate: float,
                         odometry_rate: float = 50.0) -> None:
    """
    Write what `ros2 bag record -a` without --use-sim-time makes of a simulator at factor.

    factor is the simulator's real-time factor; its vehicle flies east at EAST_SPEED, 1 m up,
    level, facing east. Headers and /clock carry simulated time from START; log times run at
    wall speed (simulated time / factor) from WALL_START, plus ros_messages.LATENCY; /rosout,
    an unrelated topic, is logged once a second from a second before the simulator starts to
    a second after it ends.
    """
    store = ros_messages.STORES['jazzy']

    def logged(t: float) -> int:
        return round((WALL_START + t / factor + ros_messages.LATENCY) * 1e9)

    imu = [('/imu', 'sensor_msgs/msg/Imu', logged(k / imu_rate), ros_messages.imu(
        store, START + k / imu_rate, (0.0, 0.0, 0.0), (0.0, 0.0, 9.80665)))
        for k in range(round(seconds * imu_rate))]
    odometry = [('/odom', 'nav_msgs/msg/Odometry', logged(k / odometry_rate),
                 ros_messages.odometry(store, START + k / odometry_rate,
                                       (EAST_SPEED * k / odometry_rate, 0.0, 1.0),
                                       (0.0, 0.0, 0.0, 1.0), (EAST_SPEED, 0.0, 0.0)))
                for k in range(round(seconds * odometry_rate))]
    clock = [('/clock', 'rosgraph_msgs/msg/Clock', logged(k / 100),
              ros_messages.clock(store, START + k / 100)) for k in range(round(seconds * 100))]
    log = store.types['rcl_interfaces/msg/Log']
    wall_seconds = round(seconds / factor) + 2
    rosout = [('/rosout', 'rcl_interfaces/msg/Log', round((WALL_START - 1.0 + k) * 1e9),
               log(stamp=ros_messages.header(store, WALL_START - 1.0 + k).stamp, level=20,
                   name='recorder', msg='still recording', file='', function='', line=0))
              for k in range(wall_seconds + 1)]
    messages = sorted(imu + odometry + clock + rosout, key=lambda m: m[2])
    write_bag(path, messages, store)


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


def as_humble_records_it(bag: str) -> None:
    """
    Make a SQLite bag as Humble's rosbag2 (0.15) writes it: no message definitions.

    Its database schema is version 3 (no message_definitions table), its metadata version 5
    (no type_description_hash): readers take the types from their own store.
    """
    (database,) = [name for name in os.listdir(bag) if name.endswith('.db3')]
    with contextlib.closing(sqlite3.connect(os.path.join(bag, database))) as connection:
        connection.execute('DROP TABLE message_definitions')
        connection.execute('UPDATE schema SET schema_version = 3')
        connection.commit()
    metadata_path = os.path.join(bag, 'metadata.yaml')
    with open(metadata_path) as stream:
        metadata = yaml.safe_load(stream)
    information = metadata['rosbag2_bagfile_information']
    information['version'] = 5
    for topic in information['topics_with_message_count']:
        del topic['topic_metadata']['type_description_hash']
    with open(metadata_path, 'w') as stream:
        yaml.safe_dump(metadata, stream)


@pytest.mark.parametrize('storage,distribution,as_humble', [
    ('sqlite3', 'humble', False), ('sqlite3', 'humble', True), ('mcap', 'jazzy', False)])
def test_runner_serves_a_bag_in_ned_frd(run, tmp_path, storage, distribution, as_humble):
    bag = str(tmp_path / 'moving')
    write_motion_bag(bag, MOTION, duration=1.0, imu_rate=400.0, odometry_rate=50.0,
                     namespace='uav1', start=START, storage=storage,
                     distribution=distribution)
    if as_humble:
        as_humble_records_it(bag)
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


def test_a_long_bag_is_answered_as_it_is_read(run, tmp_path):
    bag = str(tmp_path / 'long')
    write_motion_bag(bag, MOTION, duration=30.0, imu_rate=1000.0, odometry_rate=50.0,
                     storage='mcap', distribution='jazzy')
    port = free_udp_port()
    process = run(bag, '--rate', '0', '--port', str(port))
    peer = SitlPeer(port)
    try:
        first_reply(peer, process, attempts=300)
        for _ in range(100):
            peer.step()
    finally:
        peer.close()
        process.send_signal(signal.SIGINT)
        output, errors = process.communicate(timeout=20)
    assert 'replied 101' in output, errors


def test_a_lock_step_replay_reads_no_further_than_its_lookahead(tmp_path, monkeypatch):
    # 31 500 messages; the first sample is pushed, and held there, after reading LOOKAHEAD_NS
    # (0.1 s: 100 IMU and 5 odometry messages) past it.
    bag = str(tmp_path / 'long')
    write_motion_bag(bag, MOTION, duration=30.0, imu_rate=1000.0, odometry_rate=50.0)
    read = []

    def counted(path, topics):
        for message in bagfile.read_messages(path, topics):
            read.append(message.topic)
            yield message
    monkeypatch.setattr(replay_module, 'read_messages', counted)
    config = config_from_parameters({})
    state = SensorState(replace(config.state, pacing=SAMPLES))
    replay = replay_module.BagReplay(replay_module.ReplaySettings(bag, rate=0.0),
                                     input_routes(config, state), state)
    replay.start()
    try:
        assert state.wait_for_primary(20.0) is not None
    finally:
        replay.stop()
    assert replay.finished.is_set()
    # Unserved, the second sample is held: nothing past its lookahead was read.
    assert 100 <= len(read) <= 110, len(read)


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


@pytest.mark.parametrize('factor', [0.5, 2.0])
def test_a_lock_step_loop_steps_sitls_time_by_one_sample(run, tmp_path, factor):
    # 0.5 s of simulated time at 400 Hz, logged over 1 s (factor 0.5) or 0.25 s (factor 2).
    bag = str(tmp_path / f'factor_{factor}')
    write_wall_clock_bag(bag, factor, seconds=0.5, imu_rate=400.0)
    samples, period = 200, 1 / 400
    port = free_udp_port()
    process = run(bag, '--rate', '0', '--loop', '--port', str(port))
    peer = SitlPeer(port)
    try:
        replies = [first_reply(peer, process)]
        for _ in range(3 * samples - 1):
            replies.append(peer.step(timeout=5.0))
    finally:
        peer.close()
        process.send_signal(signal.SIGINT)
        _, errors = process.communicate(timeout=20)
    timestamps = [r['timestamp'] for r in replies]
    steps = [b - a for a, b in zip(timestamps, timestamps[1:])]
    across = [steps[loop * samples - 1] for loop in (1, 2)]
    print(f'factor {factor}: steps across the loops {across}')
    assert across == pytest.approx([period] * 2, abs=1e-9), across
    assert steps == pytest.approx([period] * len(steps), abs=1e-9)
    assert 'dropped' not in errors, errors[-2000:]


@pytest.mark.parametrize('factor', [0.5, 2.0])
def test_a_loop_at_a_rate_serves_each_pass_on_from_the_last(run, tmp_path, patient_config,
                                                            factor):
    # 0.5 s of simulated time per pass (200 IMU samples, the next pass one step after the
    # last: 0.5 s on), played at wall speed, answered on SITL's 1200 Hz grid.
    bag = str(tmp_path / f'factor_{factor}')
    write_wall_clock_bag(bag, factor, seconds=0.5, imu_rate=400.0)
    period, frame = 0.5, 1 / 1200
    port = free_udp_port()
    process = run(bag, '--rate', '1', '--loop', '--port', str(port), '--config', patient_config)
    peer = SitlPeer(port)
    try:
        replies = [first_reply(peer, process)]
        replies += peer.lock_step(1800, timeout=60.0)
    finally:
        peer.close()
        process.send_signal(signal.SIGINT)
        _, errors = process.communicate(timeout=20)
    assert len(replies) == 1801, errors[-2000:]
    timestamps = [r['timestamp'] for r in replies]
    steps = [b - a for a, b in zip(timestamps, timestamps[1:])]
    assert steps == pytest.approx([frame] * 1800, abs=1e-9)
    # Each pass follows the last by one IMU step: the simulated time a reply shows (from the
    # distance flown east in its pass) runs on with SITL's time, pass after pass. Where in
    # its pass SITL's time 0 fell: the offset most replies agree on.
    offsets = collections.Counter(
        round((reply['position'][1] / EAST_SPEED - timestamp) % period, 6)
        for reply, timestamp in zip(replies, timestamps))
    first = offsets.most_common(1)[0][0]
    passes = set()
    for reply, timestamp in zip(replies, timestamps):
        position = (first + timestamp) % period
        # Left out: after a pass's last odometry, and before the next pass's second IMU
        # sample (a grid instant is answered once the IMU reaches it, and the odometry
        # logged with the first sample may not be there yet: it is carried, correctly, from
        # the pass before).
        if 1 / 400 <= position <= period - 1 / 50:
            passes.add(int((first + timestamp) // period))
            assert reply['position'][1] == pytest.approx(EAST_SPEED * position, abs=1e-6), \
                (timestamp, reply['position'])
    assert len(passes) >= 3, passes
    # Frame 0 may come before the first odometry; after it, every frame is answered.
    assert 'dropped' not in errors, errors[-2000:]
    assert not re.search('no reply to SITL frame [1-9]', errors), errors[-2000:]


def test_a_looping_replay_starts_its_checks_over_each_loop(run):
    port = free_udp_port()
    process = run('--port', str(port), '--rate', '0')  # the 2 s sample bag at 1200 Hz, looping
    peer = SitlPeer(port)
    try:
        replies = [first_reply(peer, process)]
        for _ in range(3000):
            replies.append(peer.step())
        process.send_signal(signal.SIGINT)
        output, errors = process.communicate(timeout=10)
    finally:
        peer.close()
    steps = [b['timestamp'] - a['timestamp'] for a, b in zip(replies, replies[1:])]
    assert steps == pytest.approx([1 / 1200] * 3000, abs=1e-9)  # across the loop at 2400 too
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
    # quad_x.yaml with the IMU of ardupilot_gazebo (FRD, rolled 180 deg from FLU) on another
    # topic: the runner must take both from the node's parameter file, outputs and all.
    preset = os.path.join(os.path.dirname(__file__), '..', 'config', 'quad_x.yaml')
    with open(preset) as stream:
        parameters = yaml.safe_load(stream)
    parameters['/**']['ros__parameters'].update(imu_topic='sensors/imu',
                                                imu_mounting_rpy=[180.0, 0.0, 0.0])
    changed = tmp_path / 'quad_frd.yaml'
    changed.write_text(yaml.safe_dump(parameters))
    store = ros_messages.STORES['humble']
    # Resting, turning left at 0.1 rad/s; the FRD IMU reads the turn and gravity's reaction
    # on its z axis, which points down: (0, 0, -0.1) rad/s and (0, 0, -g).
    messages = [('/sensors/imu', 'sensor_msgs/msg/Imu', round((START + k / 400) * 1e9),
                 ros_messages.imu(store, START + k / 400, (0.0, 0.0, -0.1),
                                  (0.0, 0.0, -9.80665))) for k in range(80)]
    messages += [('/odom', 'nav_msgs/msg/Odometry', round((START + k / 50) * 1e9),
                  ros_messages.odometry(store, START + k / 50, (0.0, 0.0, 0.0),
                                        (0.0, 0.0, 0.0, 1.0))) for k in range(10)]
    bag = str(tmp_path / 'frd')
    write_bag(bag, sorted(messages, key=lambda m: m[2]), store)
    port = free_udp_port()
    process = run(bag, '--config', str(changed), '--rate', '0', '--port', str(port))
    peer = SitlPeer(port)
    try:
        replies = [first_reply(peer, process)]
        for _ in range(10):
            replies.append(peer.step(pwm=[1500] * 4 + [0] * 12))
        process.send_signal(signal.SIGINT)
    finally:
        peer.close()
        output, errors = process.communicate(timeout=20)
    assert process.returncode == 0, errors
    # SITL's body frame is FRD too: turning left is a negative yaw rate, the reaction up.
    for reply in replies:
        assert reply['imu.gyro'] == pytest.approx((0.0, 0.0, -0.1), abs=1e-6)
        assert reply['imu.accel_body'] == pytest.approx((0.0, 0.0, -9.80665), abs=1e-6)
    assert 'replied 11' in output
