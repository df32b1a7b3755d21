"""
mujoco.launch.py flies real ArduCopter under `ros2 launch`; rosbag2 records the flight.

One vehicle at the default rates (1 kHz IMU, 250 Hz odometry), one at 250 Hz with two `ros2
bag record` running (MCAP, Jazzy's default, and SQLite, Humble's), and two at once (count:=2) at
250 Hz. Each recorded bag then goes round: `ros2 bag info`, `ros2 bag play --clock` into
bridge.launch.py (use_sim_time) serving a SITL peer (MCAP also with --loop), and the project's
own `replay` and `check`. Skips where the prebuilt SITL (ARDUPILOT_SITL_DIR) is missing.
"""

import contextlib
from dataclasses import dataclass
import io
import os
import re
import threading
from typing import Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import pytest

from ros2_tools import (
    bag_info_counts, bag_window, free_instances, launch, preset_with, read_bag, ros2, Running,
    share, start_sitl, stop, stop_recorder)
import sitl_flight
from sitl_peer import SitlPeer

pytestmark = [
    pytest.mark.usefixtures('sourced_ros2'),
    pytest.mark.skipif(sitl_flight.sitl_binary() is None,
                       reason=f'real ArduCopter: set {sitl_flight.SITL_DIR_VARIABLE} to a folder '
                              'with arducopter and copter.parm')]

ALTITUDE, HOLD = 5.0, 5.0
# The frame grid's promise (test/test_alignment.py: 1 mm, 0.01 deg on a smooth trajectory),
# widened for a real flight's attitude: where a played IMU sample arrives before its
# odometry, the bridge carries attitude by the gyro over up to one 4 ms odometry period,
# which departs from the slerp between recorded samples by the angular acceleration's share
# (0.087 deg measured in a 250 Hz takeoff).
POSITION_TOLERANCE, ATTITUDE_TOLERANCE_DEG = 2e-3, 0.15
STORAGES = ['mcap', 'sqlite3']   # rosbag2's storage plugins: Jazzy's default, Humble's
REAL_TIME_FACTOR, PACED = sitl_flight.REAL_TIME_FACTOR, sitl_flight.PACED


@dataclass
class LaunchedFlight:
    """A flight through mujoco.launch.py: what SITL saw and what the processes said."""

    record: sitl_flight.FlightRecord
    launch_output: str
    sitl_log: str
    altitude: float = ALTITUDE
    # SITL's median gyro rate (Hz), median loop rate (Hz) and long loops, from its dataflash.
    figures: Tuple[Optional[float], Optional[float], int] = (None, None, 0)

    def summary(self) -> str:
        record = self.record
        if not record.hover:
            return (f'no hover (armed {record.armed}, reached {record.reached}); SITL said '
                    f'{record.texts[-8:]}')
        gyro, loop, long_loops = self.figures
        return (f'hover error {record.worst_hover_error(self.altitude):.3f} m (against the '
                f'simulator {record.worst_truth_error():.3f} m) over {record.sim_seconds:.1f} s '
                f'sim, {record.wall_seconds:.0f} s wall; SITL gyro {gyro} Hz, loop {loop} Hz, '
                f'{long_loops} long loops')


def quad_odometry(instance: int) -> str:
    """mujoco.launch.py's odometry topic of the vehicle serving instance."""
    return f'/quad{instance}/odom'


def fly_launched(instances: List[int], launched: Running,
                 altitude: Union[float, Mapping[int, float]] = ALTITUDE,
                 odometry: Callable[[int], str] = quad_odometry,
                 speedup: float = 1.0) -> Dict[int, LaunchedFlight]:
    """
    Fly real ArduCopter on each instance at once, each through its launched vehicle.

    The simulator's truth is the height on odometry(instance) above its first message.
    altitude: all vehicles' target, or {instance: its own}. speedup: SITL's (start_sitl).
    """
    altitudes = (dict(altitude) if isinstance(altitude, Mapping)
                 else {instance: altitude for instance in instances})
    from test_node_flight import SimulatorTruth
    domain = int(os.environ['ROS_DOMAIN_ID'])
    assert launched.wait_for_text('listening on UDP', 60, count=len(instances)), \
        launched.output
    records: Dict[int, sitl_flight.FlightRecord] = {}
    logs: Dict[int, str] = {}
    figures: Dict[int, Tuple[Optional[float], Optional[float], int]] = {}

    def fly(instance: int) -> None:
        truth = SimulatorTruth(odometry(instance), domain)
        records[instance] = sitl_flight.FlightRecord()
        try:
            with start_sitl(instance, speedup) as sitl:
                try:
                    records[instance] = sitl_flight.fly(
                        sitl, altitudes[instance], HOLD, lambda: truth.height,
                        timeout=sitl_flight.FLIGHT_TIMEOUT / REAL_TIME_FACTOR)
                finally:
                    logs[instance] = sitl.log()
                    figures[instance] = sitl.figures()
        except (OSError, sitl_flight.SitlDied) as error:
            logs[instance] = logs.get(instance, '') + f'\nSITL: {error}'
        finally:
            truth.close()

    threads = [threading.Thread(target=fly, args=(n,)) for n in instances]
    # pymavlink prints a line for every read of a closed socket: a dead SITL would fill the
    # failure report with megabytes of them.
    chatter = io.StringIO()
    with contextlib.redirect_stdout(chatter):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    lines = chatter.getvalue().splitlines()
    if lines:
        print(f'pymavlink said {len(lines)} line(s), the last: {lines[-1]}')
    return {n: LaunchedFlight(records[n], launched.output, logs[n], altitudes[n],
                              figures.get(n, (None, None, 0))) for n in instances}


def assert_hovered(flight: LaunchedFlight) -> None:
    record = flight.record
    assert record.armed and record.reached, (record.texts, flight.launch_output[-3000:],
                                             flight.sitl_log[-2000:])
    assert record.sim_seconds >= HOLD
    assert record.worst_hover_error(ALTITUDE) < 0.5, record.hover
    assert record.worst_truth_error() < 0.5, record.hover
    assert record.landed, ('not disarmed after LAND; SITL said', record.texts[-10:])


def test_real_arducopter_hovers_through_mujoco_launch_at_the_default_rates(sourced_ros2):
    (instance,) = free_instances(1)
    launched = launch('mujoco.launch.py', 'namespace_prefix:=quad', f'first_instance:={instance}',
                      PACED)
    try:
        flight = fly_launched([instance], launched)[instance]
    finally:
        output = stop(launched)
    print(f'mujoco.launch.py, 1 kHz IMU, 250 Hz odometry: {flight.summary()}')
    flight.launch_output = output
    assert_hovered(flight)
    assert f'{REAL_TIME_FACTOR:g} x real time' in output, output[-2000:]
    # Both processes started by their executables and ended cleanly on Ctrl-C.
    assert output.count('process has finished cleanly') == 2, output[-2000:]


@pytest.fixture(scope='module')
def recorded_flight(sourced_ros2, tmp_path_factory
                    ) -> Tuple[LaunchedFlight, Dict[str, str], str]:
    """
    One vehicle through mujoco.launch.py, recorded by ros2 bag record in each storage at once.

    At 250 Hz: the recorders' thousands of messages a second on top of a 1 kHz simulator
    starve SITL on a busy 2-core machine (gyro rate below its arming check).
    """
    (instance,) = free_instances(1)
    namespace = f'quad{instance}'
    folder = tmp_path_factory.mktemp('bags')
    bags = {storage: str(folder / f'flight_{storage}') for storage in STORAGES}
    launched = launch('mujoco.launch.py', 'namespace_prefix:=quad', f'first_instance:={instance}',
                      'imu_rate:=250.0', 'odom_rate:=250.0', PACED)
    flight = fly_recorded(instance, launched, bags,
                          ['/clock', f'/{namespace}/imu', f'/{namespace}/odom',
                           f'/{namespace}/servo_pwm', f'/{namespace}/command/motor_speed',
                           '/diagnostics'])
    return flight, bags, namespace


def fly_recorded(instance: int, launched: Running, bags: Dict[str, str], topics: List[str],
                 altitude: float = ALTITUDE, odometry: Callable[[int], str] = quad_odometry,
                 stopping: Callable[[Running], str] = stop) -> LaunchedFlight:
    """
    Fly real ArduCopter through a launched vehicle while `ros2 bag record` records topics.

    bags: {storage: folder}, one recorder each, all at once. The recorders and then the launch
    are stopped by Ctrl-C, cleanly (stop_recorder, stopping).
    """
    recorders = {storage: Running(['ros2', 'bag', 'record', '-s', storage, '--use-sim-time',
                                   '-o', bag, *topics]) for storage, bag in bags.items()}
    try:
        for recorder in recorders.values():
            assert recorder.wait_for_text('Recording...', 30), recorder.output
        flight = fly_launched([instance], launched, altitude, odometry)[instance]
        print(f'{launched.command[3]}, recorded: {flight.summary()}')
    finally:
        try:
            for storage, recorder in recorders.items():
                stop_recorder(recorder, bags[storage])
        finally:
            output = stopping(launched)
    flight.launch_output = output
    return flight


def test_real_arducopter_hovers_through_mujoco_launch_while_recorded(recorded_flight):
    flight, bags, _ = recorded_flight
    assert_hovered(flight)
    assert flight.launch_output.count('process has finished cleanly') == 2, \
        flight.launch_output[-2000:]
    for bag in bags.values():
        assert os.path.isfile(os.path.join(bag, 'metadata.yaml'))


def test_two_vehicles_at_250_hz_through_mujoco_launch(sourced_ros2):
    instances = free_instances(2)
    launched = launch('mujoco.launch.py', 'count:=2', 'namespace_prefix:=quad',
                      f'first_instance:={instances[0]}', 'imu_rate:=250.0', 'odom_rate:=250.0',
                      PACED)
    try:
        flights = fly_launched(instances, launched)
    finally:
        output = stop(launched)
    for instance, flight in flights.items():
        print(f'mujoco.launch.py count:=2 at 250 Hz, quad{instance}: {flight.summary()}')
        flight.launch_output = output
        assert_hovered(flight)
    assert output.count('process has finished cleanly') == 4, output[-2000:]


@pytest.mark.parametrize('storage', STORAGES)
def test_ros2_bag_info_counts_the_recorded_topics(recorded_flight, storage):
    _, bags, namespace = recorded_flight
    bag = bags[storage]
    counts = bag_info_counts(bag)
    # ros2 bag info aligns its values: 'Storage id:        mcap'.
    assert re.search(rf'^Storage id:\s+{storage}$', ros2('bag', 'info', bag).stdout, re.M)
    asked = {'/clock', f'/{namespace}/imu', f'/{namespace}/odom', f'/{namespace}/servo_pwm',
             f'/{namespace}/command/motor_speed', '/diagnostics'}
    assert set(counts) == asked
    messages = read_bag(bag)
    for topic in asked:
        assert counts[topic] == len(messages[topic]) > 0, topic
    imu = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9
           for _, m in messages[f'/{namespace}/imu']]
    # 250 Hz of simulated time, odometry every step, a clock every step; the clock counted
    # over the (sim time) span the IMU was recorded: the recorder subscribed to /clock first,
    # 0.4 s of steps before the IMU on a loaded machine.
    assert len(imu) == pytest.approx((imu[-1] - imu[0]) * 250, rel=0.01)
    # The two subscriptions start and stop apart by a few messages on a busy machine.
    assert counts[f'/{namespace}/odom'] == pytest.approx(counts[f'/{namespace}/imu'], abs=10)
    received = [t for t, _ in messages[f'/{namespace}/imu']]
    clock = [t for t, _ in messages['/clock'] if received[0] <= t <= received[-1]]
    assert len(clock) == pytest.approx(len(received), abs=10)


def ned_frd(orientations: np.ndarray):
    """Rotations of FLU bodies in ENU (x, y, z, w rows) as FRD bodies in NED, by scipy."""
    from scipy.spatial.transform import Rotation
    ned_from_enu = Rotation.from_matrix([[0, 1, 0], [1, 0, 0], [0, 0, -1]])
    flu_from_frd = Rotation.from_matrix(np.diag([1.0, -1.0, -1.0]))
    return ned_from_enu * Rotation.from_quat(orientations) * flu_from_frd


def worst_errors(odometry: list, replies: list) -> Tuple[float, float, float]:
    """
    Align the replies with the recorded odometry; return the offset and worst errors.

    Reply k describes the instant t0 + timestamp_k; t0 (the first reply's odometry instant,
    unknown to SITL) is the recorded stamp that fits the replies' positions best. Positions
    are interpolated linearly and attitudes by slerp, independently of the bridge.
    """
    from scipy.spatial.transform import Slerp
    stamps = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for _, m in odometry])
    enu = np.array([[m.pose.pose.position.x, m.pose.pose.position.y, m.pose.pose.position.z]
                    for _, m in odometry])
    quats = np.array([[m.pose.pose.orientation.x, m.pose.pose.orientation.y,
                       m.pose.pose.orientation.z, m.pose.pose.orientation.w]
                      for _, m in odometry])
    ned = enu[:, [1, 0, 2]] * [1.0, 1.0, -1.0]
    offsets = np.array([r['timestamp'] for r in replies])
    offsets -= offsets[0]
    got = np.array([r['position'] for r in replies])

    def positions(t0: float, every: int = 1) -> np.ndarray:
        t = t0 + offsets[::every]
        return np.stack([np.interp(t, stamps, ned[:, i]) for i in range(3)], axis=1)

    def best(candidates: np.ndarray, every: int = 1) -> float:
        errors = [float(np.abs(positions(t, every) - got[::every]).max()) for t in candidates]
        return float(candidates[int(np.argmin(errors))])

    # Over the whole bag by 1 ms on every 8th reply (every reply took minutes on Humble's
    # numpy), then by 1 ms and 10 us around the best on all.
    first, last = stamps[0], stamps[-1] - offsets[-1]
    t0 = best(np.arange(first, last, 0.001), every=8)
    for step, around in ((0.001, 0.004), (1e-5, 0.001)):
        t0 = best(np.clip(np.arange(t0 - around, t0 + around, step), first, last))
    position_error = float(np.linalg.norm(positions(t0) - got, axis=1).max())
    slerp = Slerp(stamps, ned_frd(quats))
    wanted = slerp(t0 + offsets)
    from scipy.spatial.transform import Rotation
    replied = Rotation.from_quat([[q[1], q[2], q[3], q[0]] for q in
                                  (r['quaternion'] for r in replies)])
    attitude_errors = np.degrees((wanted.inv() * replied).magnitude())
    worst = int(np.argmax(attitude_errors))
    print(f'worst attitude at reply {worst} of {len(replies)}')
    return t0, position_error, float(attitude_errors[worst])


def patient_preset(tmp_path) -> str:
    """Write the MuJoCo preset letting SITL lag the played bag by up to 10 s."""
    return preset_with(str(tmp_path), 'patient.yaml', '    max_backlog: 10.0\n')


def takeoff_offset(messages: Dict[str, list], namespace: str) -> float:
    """Seconds from the bag's start to 1 s before the vehicle left the ground."""
    odometry = messages[f'/{namespace}/odom']
    start = min(received[0][0] for received in messages.values())
    ground = odometry[0][1].pose.pose.position.z
    lifted = next(t for t, m in odometry if m.pose.pose.position.z > ground + 0.3)
    return max(0.0, (lifted - start) * 1e-9 - 1.0)


@pytest.mark.parametrize('storage, loop', [('mcap', False), ('mcap', True),
                                           ('sqlite3', False)])
def test_ros2_bag_play_clock_into_the_launched_node_serves_the_recording(
        recorded_flight, tmp_path, storage, loop):
    _, bags, namespace = recorded_flight
    bag = bags[storage]
    messages = read_bag(bag)
    start = takeoff_offset(messages, namespace)
    (instance,) = free_instances(1)
    peer = SitlPeer(9002 + 10 * instance)
    launched = launch('bridge.launch.py', f'namespace:={namespace}', f'instance:={instance}',
                      'use_sim_time:=true', f'params_file:={patient_preset(tmp_path)}')
    topics = [f'/{namespace}/imu', f'/{namespace}/odom']
    # Looping over three seconds of the takeoff: a bag of them (Humble's ros2 bag play has no
    # --playback-duration).
    played = ([bag_window(bag, str(tmp_path / 'window'), start, 3.0, topics), '--loop'] if loop
              else [bag, '--start-offset', f'{start:.3f}'])
    player = Running(['ros2', 'bag', 'play', *played, '--clock', '--topics', *topics])
    try:
        assert launched.wait_for_text('listening on UDP', 60), launched.output
        # Three seconds of the takeoff, or, looping over three seconds, more than two rounds.
        frames = 1200 * (7 if loop else 3)
        replies = peer.lock_step(frames, [1000] * 16, timeout=60.0)
    finally:
        peer.close()
        player.interrupt()
        output = stop(launched)
    assert len(replies) == frames, (len(replies), output[-2000:], player.output[-2000:])
    if loop:
        # Each jump back: the bridge restarts its grid at the bag's start, SITL time carries on.
        positions = np.array([r['position'] for r in replies])
        jumps = np.flatnonzero(np.linalg.norm(np.diff(positions, axis=0), axis=1) > 0.05)
        assert len(jumps) >= 2, output[-2000:]
        # Said at least once: the warning is rate-limited (5 s), a round of the loop is 3 s.
        assert 'physics time went back' in output, output[-2000:]
        sessions = np.split(np.array(replies, dtype=object), jumps + 1)
    else:
        sessions = [replies]
    odometry = messages[f'/{namespace}/odom']
    for session in sessions:
        if len(session) < 600:
            continue   # the end of the last round: too short to align alone
        t0, position, attitude = worst_errors(odometry, list(session))
        if loop and attitude >= ATTITUDE_TOLERANCE_DEG:
            # The first 20 ms after a jump back: shown above, judged without them here.
            t0, position, attitude = worst_errors(odometry, list(session[24:]))
        print(f'ros2 bag play --clock{" --loop" if loop else ""}: {len(session)} replies from '
              f'{t0:.3f} s, worst position {position * 1000:.2f} mm, attitude {attitude:.3f} deg')
        assert position < POSITION_TOLERANCE and attitude < ATTITUDE_TOLERANCE_DEG


@pytest.mark.parametrize('storage', STORAGES)
def test_a_ros2_bag_recorded_flight_replays_and_passes_check(recorded_flight, storage):
    _, bags, namespace = recorded_flight
    bag = bags[storage]
    checked = ros2('run', 'ardupilot_json_bridge', 'ardupilot-json-bridge', 'check', bag,
                   '--namespace', namespace, '--config', share('config', 'mujoco_quad_x.yaml'))
    assert checked.returncode == 0, checked.stdout
    print(checked.stdout)
    (instance,) = free_instances(1)
    peer = SitlPeer(9002 + 10 * instance)
    replay = Running(['ros2', 'run', 'ardupilot_json_bridge', 'ardupilot-json-bridge', 'replay',
                      bag, '--namespace', namespace, '--config',
                      share('config', 'mujoco_quad_x.yaml'), '--rate', '0', '--instance',
                      str(instance)])
    try:
        assert replay.wait_for_text('listening on UDP', 30), replay.output
        replies = peer.lock_step(2000, [1000] * 16, timeout=60.0)
    finally:
        peer.close()
        replay.interrupt()
    assert len(replies) == 2000, replay.output[-2000:]
    assert 'Traceback' not in replay.output, replay.output[-2000:]
    # Lock-step replay: one IMU sample per frame, the recording's odometry at each.
    odometry = read_bag(bag)[f'/{namespace}/odom']
    _, position, attitude = worst_errors(odometry, replies)
    assert position < POSITION_TOLERANCE and attitude < ATTITUDE_TOLERANCE_DEG
