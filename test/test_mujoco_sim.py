"""mujoco_sim as users start it: it publishes, and SIGTERM or SIGINT end it cleanly."""

import math
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, List, Tuple

import pytest

from conftest import reaped

pytest.importorskip('rclpy', reason='needs ROS 2 (rclpy): source ROS or pip install '
                                    "'.[jazzy]'")
pytest.importorskip('mujoco', reason='needs the mujoco package')


@pytest.mark.parametrize('signal_number', [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_simulator_cleanly_at_any_moment(signal_number):
    # PYTHONFAULTHANDLER: a hang is aborted below with every thread's stack in the output.
    environment = dict(os.environ, PYTHONFAULTHANDLER='1')
    # The physics thread publishes every millisecond: stop it at several moments, since a
    # signal that lands mid-publish once left a traceback behind.
    for attempt in range(4):
        process = subprocess.Popen(
            [sys.executable, '-m', 'ardupilot_json_bridge.cli', 'mujoco-sim', '--ros-args',
             '-r', '__ns:=/stop'],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
        output = Output(process)
        # Once it runs (a loaded machine may take seconds to import), at several moments.
        if not output.started.wait(60.0):
            process.kill()
            pytest.fail(f'no start-up line within 60 s; output:\n{output.text()}')
        time.sleep(0.17 * attempt)
        process.send_signal(signal_number)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            process.wait()
            pytest.fail(f'still running 15 s after {signal_number!r} (attempt {attempt}); '
                        f'its threads:\n{output.text()}')
        assert process.returncode == 0, output.text()
        assert 'Traceback' not in output.text(), output.text()


class Output:
    """A process's output, read by a thread of its own; started once the start-up line came."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: List[str] = []
        self.started = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            self.lines.append(line)
            if 'physics and IMU at 1000 Hz' in line:
                self.started.set()

    def text(self) -> str:
        """Return everything read, to the end once the process ended."""
        self._thread.join(5.0)
        return ''.join(self.lines)


def simulator(namespace: str, *parameters: str) -> subprocess.Popen:
    arguments = [item for parameter in parameters for item in ('-p', parameter)]
    return subprocess.Popen(
        [sys.executable, '-m', 'ardupilot_json_bridge.cli', 'mujoco-sim', '--ros-args', '-r',
         f'__ns:={namespace}', *arguments], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)


def listen(process: subprocess.Popen, subscribe: Callable[[Any], None],
           done: Callable[[], bool], each: Callable[[], None] = lambda: None) -> str:
    """Spin a node made by subscribe until done() (or 60 s), calling each(); the sim's output."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    with reaped(process):
        context = rclpy.Context()
        rclpy.init(context=context)
        try:
            node = rclpy.create_node('listener', context=context)
            subscribe(node)
            executor = SingleThreadedExecutor(context=context)
            executor.add_node(node)
            deadline = time.monotonic() + 60.0
            while not done() and time.monotonic() < deadline and process.poll() is None:
                each()
                executor.spin_once(timeout_sec=0.05)
            executor.shutdown()
            node.destroy_node()
        finally:
            rclpy.shutdown(context=context)
        process.terminate()
        output, _ = process.communicate(timeout=15)
    return output


def test_a_subscriber_receives_the_resting_vehicles_imu_and_odometry():
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import Imu
    imu, odometry = [], []

    def subscribe(node) -> None:
        node.create_subscription(Imu, '/listened/imu', imu.append, 100)
        node.create_subscription(Odometry, '/listened/odom', odometry.append, 100)

    output = listen(simulator('/listened'), subscribe,
                    lambda: len(imu) >= 1000 and len(odometry) >= 250)
    assert len(imu) >= 1000 and len(odometry) >= 250, \
        f'received {len(imu)} imu and {len(odometry)} odom messages; simulator:\n{output}'
    # Physics steps of 1 ms, odometry every fourth (a slow subscriber may miss some).
    for messages, period in ((imu, 1e-3), (odometry, 4e-3)):
        stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in messages]
        steps = [(b - a) / period for a, b in zip(stamps, stamps[1:])]
        assert all(step >= 1 - 1e-6 and abs(step - round(step)) < 1e-6 for step in steps), \
            [s for s in steps if not (s >= 1 - 1e-6 and abs(s - round(s)) < 1e-6)][:5]
    # At rest on its legs, level, facing east (REP-103, FLU): the IMU reads no turn and
    # gravity's reaction up; odometry holds the pose still, 7 cm up.
    settled = imu[len(imu) // 2:]
    for message in settled:
        gyro, accel = message.angular_velocity, message.linear_acceleration
        assert max(abs(gyro.x), abs(gyro.y), abs(gyro.z)) < 1e-3, gyro
        assert (accel.x, accel.y, accel.z) == pytest.approx((0.0, 0.0, 9.80665), abs=0.05)
    assert {m.header.frame_id for m in imu} == {'base_link'}
    for message in odometry[len(odometry) // 2:]:
        pose, twist = message.pose.pose, message.twist.twist
        assert (pose.position.x, pose.position.y, pose.position.z) == pytest.approx(
            (0.0, 0.0, 0.07), abs=2e-3)
        q = pose.orientation
        assert math.hypot(q.x, q.y, q.z, q.w) == pytest.approx(1.0, abs=1e-9)
        assert abs(q.w) == pytest.approx(1.0, abs=1e-4)
        assert (twist.linear.x, twist.linear.y, twist.linear.z) == pytest.approx(
            (0.0, 0.0, 0.0), abs=1e-2)
    assert {(m.header.frame_id, m.child_frame_id) for m in odometry} == {('odom', 'base_link')}


def test_real_time_factor_paces_simulated_time_slower_than_the_wall_clock():
    from sensor_msgs.msg import Imu
    received: List[Tuple[float, float]] = []   # (wall s on arrival, stamp s)

    def subscribe(node) -> None:
        node.create_subscription(Imu, '/paced/imu', lambda m: received.append(
            (time.monotonic(), m.header.stamp.sec + m.header.stamp.nanosec * 1e-9)), 100)

    output = listen(simulator('/paced', 'real_time_factor:=0.5', 'imu_rate:=250'), subscribe,
                    lambda: len(received) > 1 and received[-1][0] - received[0][0] > 3.0)
    assert '0.5 x real time' in output and len(received) > 1, output
    (wall0, sim0), (wall1, sim1) = received[0], received[-1]
    # Never ahead of half the wall clock (beyond a late first arrival); a busy machine may
    # slow it a little, but not to a factor applied twice (0.25).
    assert 0.3 * (wall1 - wall0) < sim1 - sim0 < 0.5 * (wall1 - wall0) + 0.2, \
        f'{sim1 - sim0:.2f} s simulated in {wall1 - wall0:.2f} s of wall time'


@pytest.mark.parametrize('value', ['0.0', '-1.0', '2.0'])
def test_a_real_time_factor_out_of_range_is_one_fatal_line(value):
    with reaped(simulator('/badpace', f'real_time_factor:={value}')) as process:
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    (fatal,) = [line for line in output.splitlines() if 'FATAL' in line]
    assert 'real_time_factor:' in fatal and 'is not above 0 and at most 1' in fatal, output
    assert 'Traceback' not in output, output


@pytest.mark.parametrize('parameter, message', [
    # round(inf) raised an OverflowError: a traceback; NaN, a ValueError naming no parameter.
    ('imu_rate:=.inf', 'imu_rate: expected a finite number, got inf'),
    ('odom_rate:=.nan', 'odom_rate: expected a finite number, got nan'),
    ('vehicles:=65', 'vehicles: 65 is above the maximum 64'),
    # A number where a list goes: a TypeError traceback ('int' object is not iterable).
    ('wind:=5', 'wind: 5 is not a list of numbers'),
    # Of another type than declared: an InvalidParameterTypeException traceback.
    ('vehicles:=2.5', 'vehicles'),
    ('vehicle:=3', 'vehicle'),
])
def test_a_number_that_cannot_work_is_one_fatal_line(parameter, message):
    with reaped(simulator('/badnumber', parameter)) as process:
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    (fatal,) = [line for line in output.splitlines() if 'FATAL' in line]
    assert message in fatal, output
    assert 'Traceback' not in output, output


def test_a_fleet_prefix_no_topic_can_take_is_one_fatal_line():
    # A name can not start with a digit: an InvalidTopicNameException traceback.
    with reaped(simulator('/badprefix', 'namespace_prefix:=1bad', 'vehicles:=2')) as process:
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    (fatal,) = [line for line in output.splitlines() if 'FATAL' in line]
    assert '1bad' in fatal, output
    assert 'Traceback' not in output, output


def test_numbers_given_as_integers_are_taken():
    # imu_rate:=250 and wind:=[5, 0, 0] are integers to ROS: declared as doubles, they ended
    # the simulator with an InvalidParameterTypeException traceback.
    from geometry_msgs.msg import Vector3Stamped
    from nav_msgs.msg import Odometry
    odometry, wind = [], []

    def subscribe(node) -> None:
        node.create_subscription(Odometry, '/integers/odom', odometry.append, 100)
        node.create_subscription(Vector3Stamped, '/integers/wind', wind.append, 100)

    output = listen(simulator('/integers', 'vehicle:=plane', 'imu_rate:=250', 'odom_rate:=50',
                              'wind:=[5, 0, 0]', 'gust:=0'), subscribe,
                    lambda: len(odometry) >= 20 and len(wind) >= 20)
    assert len(odometry) >= 20 and len(wind) >= 20, output
    assert 'Traceback' not in output, output
    stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in odometry]
    assert min(b - a for a, b in zip(stamps, stamps[1:])) == pytest.approx(0.02, abs=1e-6)
    assert {(m.vector.x, m.vector.y, m.vector.z) for m in wind} == {(5.0, 0.0, 0.0)}


def test_a_fleet_of_two_publishes_each_vehicle_in_its_namespace_and_takes_its_commands():
    from nav_msgs.msg import Odometry
    from std_msgs.msg import Float64MultiArray
    odometry = {0: [], 1: []}
    publishers = []
    command = [sys.executable, '-m', 'ardupilot_json_bridge.cli', 'mujoco-sim', '--ros-args',
               '-r', '__ns:=/fleet', '-p', 'vehicles:=2']

    def subscribe(node) -> None:
        for index in (0, 1):
            node.create_subscription(Odometry, f'/fleet/vehicle{index}/odom',
                                     odometry[index].append, 100)
        publishers.append(node.create_publisher(
            Float64MultiArray, '/fleet/vehicle1/command/motor_speed', 10))

    # Vehicle 1's rotors at 500 rad/s (above hover's 419): it climbs, vehicle 0 rests.
    output = listen(
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
        subscribe, lambda: (len(odometry[0]) >= 250 and odometry[1]
                            and odometry[1][-1].pose.pose.position.z > 0.5),
        lambda: publishers[0].publish(Float64MultiArray(data=[500.0] * 4)))
    assert odometry[0] and odometry[1], f'no odometry; simulator:\n{output}'
    assert '2 vehicles in one world' in output, output
    # Spaced 2 m apart north (ENU y); vehicle 0 at rest on its legs, vehicle 1 climbing.
    rest, flying = odometry[0][-1].pose.pose.position, odometry[1][-1].pose.pose.position
    assert (rest.x, rest.y, rest.z) == pytest.approx((0.0, 0.0, 0.07), abs=2e-3)
    assert (flying.x, flying.y) == pytest.approx((0.0, 2.0), abs=0.05)
    assert flying.z > 0.5
