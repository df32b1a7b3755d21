"""
The node as users start it: `ardupilot-json-bridge node --ros-args ...`.

In a process of its own, fed by a simulator node on simulated time, served to a SITL peer.
Checks replies, commands (values and QoS), /diagnostics, a clean exit on SIGINT and SIGTERM,
and no cross-talk between two namespaces.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List

import pytest

rclpy = pytest.importorskip('rclpy', reason='needs ROS 2 (rclpy): source ROS or pip install '
                                            "'.[jazzy]'")

from builtin_interfaces.msg import Time  # noqa: E402, I100, I202
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import Imu  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402

from conftest import free_udp_port, motor_command, reaped  # noqa: E402
from sitl_peer import SitlPeer  # noqa: E402

CONFIG = os.path.join(os.path.dirname(__file__), '..', 'config', 'mujoco_quad_x.yaml')
RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
STEP = 0.004


class Simulator:
    """
    A simulator stand-in publishing /clock, and `imu` and `odom` in each namespace.

    The vehicle rests at ENU x = east, at 250 Hz of simulated time paced to the wall clock.
    Faults to switch on while it runs: odometry stamped with the wall clock (a plugin or relay
    on the wrong clock), and a clock reset (jump_back).
    """

    def __init__(self, easts: Dict[str, float], command_type: type = Float64MultiArray,
                 command_values: Callable[[Any], List[float]] = lambda m: list(m.data),
                 start: float = 0.0) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node('simulator', context=self.context)
        self.easts = easts
        self.clock = self.node.create_publisher(Clock, '/clock', 10)
        self.publishers = {ns: (self.node.create_publisher(Imu, f'/{ns}/imu', RELIABLE),
                                self.node.create_publisher(Odometry, f'/{ns}/odom', RELIABLE))
                           for ns in easts}
        self.commands: Dict[str, List[List[float]]] = {ns: [] for ns in easts}
        for ns in easts:
            self.node.create_subscription(
                command_type, f'/{ns}/command/motor_speed',
                lambda message, ns=ns: self.commands[ns].append(command_values(message)),
                RELIABLE)
        self.diagnostics: List[DiagnosticArray] = []
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self.diagnostics.append,
                                      RELIABLE)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.running = True
        self.odometry_on_wall_clock = False
        self.jumps = 0
        self._jump_back = 0
        self._start_step = round(start / STEP)
        self.threads = [threading.Thread(target=self.executor.spin, daemon=True),
                        threading.Thread(target=self._publish, daemon=True)]
        for thread in self.threads:
            thread.start()

    def jump_back(self, seconds: float) -> None:
        """Set the simulated clock back by seconds, once (a simulator reset)."""
        self._jump_back = round(seconds / STEP)

    def _publish(self) -> None:
        started, step, sim_step = time.monotonic(), 0, self._start_step
        while self.running:
            step += 1
            sim_step += 1
            if self._jump_back:
                sim_step, self._jump_back = max(1, sim_step - self._jump_back), 0
                self.jumps += 1
            sec, nanosec = divmod(round(sim_step * STEP * 1e9), 1_000_000_000)
            clock = Clock()
            clock.clock.sec, clock.clock.nanosec = sec, nanosec
            self.clock.publish(clock)
            for ns, (imu_publisher, odom_publisher) in self.publishers.items():
                odometry = Odometry()
                odometry.header.stamp = clock.clock
                if self.odometry_on_wall_clock:
                    wall_sec, wall_nanosec = divmod(time.time_ns(), 1_000_000_000)
                    odometry.header.stamp = Time(sec=wall_sec, nanosec=wall_nanosec)
                odometry.pose.pose.position.x = self.easts[ns]
                odometry.pose.pose.orientation.w = 1.0
                imu = Imu()
                imu.header.stamp = clock.clock
                imu.linear_acceleration.z = 9.80665
                odom_publisher.publish(odometry)
                imu_publisher.publish(imu)
            time.sleep(max(0.0, started + step * STEP - time.monotonic()))

    def close(self) -> None:
        self.running = False
        self.threads[1].join()
        self.executor.shutdown()
        self.threads[0].join(5.0)
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def start_node(namespace: str, port: int, sim_time: bool = True,
               *parameters: str) -> subprocess.Popen:
    """Start the node as users do; parameters are extra name:=value settings."""
    extra = [argument for parameter in parameters for argument in ('-p', parameter)]
    return subprocess.Popen(
        [sys.executable, '-m', 'ardupilot_json_bridge.cli', 'node', '--ros-args', '-r',
         f'__ns:=/{namespace}', '--params-file', CONFIG, '-p',
         f'use_sim_time:={str(sim_time).lower()}', '-p', f'port:={port}', *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def conventions_values(simulator: 'Simulator', namespace: str) -> Dict[str, str]:
    """Return the newest conventions status's values (check: verdict and figures)."""
    statuses = [status for report in simulator.diagnostics for status in report.status
                if status.name == f'{namespace}/json_sitl_bridge: conventions']
    return {v.key: v.value for v in statuses[-1].values} if statuses else {}


def wait_for(condition, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


@pytest.mark.parametrize('stop_signal', [signal.SIGINT, signal.SIGTERM])
def test_the_node_process_end_to_end(stop_signal):
    port = free_udp_port()
    simulator = Simulator({'uav1': 3.0})
    peer = SitlPeer(port)
    try:
        with reaped(start_node('uav1', port)) as node:
            replies = peer.lock_step(200, [1500] * 4 + [1000] * 12, timeout=30.0)
            assert len(replies) == 200, node.stdout.read() if node.poll() is not None else ''
            assert replies[-1]['position'] == pytest.approx((0.0, 3.0, 0.0))  # ENU x is east
            assert replies[-1]['imu.accel_body'] == pytest.approx((0.0, 0.0, -9.80665))
            assert replies[0]['timestamp'] == 0.0
            # One frame a step; two where SITL (this peer, on a busy machine) fell behind and
            # catches up: never a jump, which would set SITL's frame rate from it.
            steps = [(b['timestamp'] - a['timestamp']) * 1200
                     for a, b in zip(replies, replies[1:])]
            assert all(step == pytest.approx(1.0) or step == pytest.approx(2.0)
                       for step in steps), steps
            assert wait_for(lambda: simulator.commands['uav1'])
            assert simulator.commands['uav1'][-1] == pytest.approx([motor_command(1500)] * 4)
            (info,) = simulator.node.get_publishers_info_by_topic('/uav1/command/motor_speed')
            assert info.qos_profile.reliability == ReliabilityPolicy.RELIABLE

            def link_messages():
                return [status.message for report in simulator.diagnostics
                        for status in report.status
                        if status.name == 'uav1/json_sitl_bridge: SITL link']
            assert wait_for(lambda: any(m.startswith('connected') for m in link_messages()))

            # At rest: gravity is judged ok, the rest undecided (the live checks, every 5 s).
            assert wait_for(lambda: 'gravity' in conventions_values(simulator, 'uav1'),
                            timeout=20.0)
            values = conventions_values(simulator, 'uav1')
            assert values['gravity'].startswith('ok'), values
            assert values['imu mounting'].startswith('undecided'), values
            # The node's clock is /clock, which the simulator stamps with.
            assert values['time: stamps against the clock'].startswith('ok'), values
            node.send_signal(stop_signal)
            output, _ = node.communicate(timeout=15)
        assert node.returncode == 0, output
        assert 'Traceback' not in output
    finally:
        peer.close()
        simulator.close()


def test_a_node_on_the_wall_clock_names_the_simulated_stamps():
    port = free_udp_port()
    simulator = Simulator({'uav1': 3.0})
    peer = SitlPeer(port)
    try:
        with reaped(start_node('uav1', port, sim_time=False)) as node:
            assert len(peer.lock_step(50, [1500] * 16, timeout=30.0)) == 50
            assert wait_for(lambda: 'gravity' in conventions_values(simulator, 'uav1'),
                            timeout=20.0)
            check = conventions_values(simulator, 'uav1')['time: stamps against the clock']
            assert check.startswith('wrong') and 'use_sim_time: true' in check, check
            node.send_signal(signal.SIGINT)
            output, _ = node.communicate(timeout=15)
        assert 'conventions: time: stamps against the clock is wrong' in output
    finally:
        peer.close()
        simulator.close()


def test_two_namespaces_on_two_ports_do_not_cross_talk():
    ports = {'uav1': free_udp_port(), 'uav2': free_udp_port()}
    easts, pwms = {'uav1': 1.0, 'uav2': -2.0}, {'uav1': 1200, 'uav2': 1800}
    simulator = Simulator(easts)
    peers = {ns: SitlPeer(port) for ns, port in ports.items()}
    try:
        with reaped(start_node('uav1', ports['uav1'])) as first, \
                reaped(start_node('uav2', ports['uav2'])) as second:
            for ns, peer in peers.items():
                pwm = [pwms[ns]] * 4 + [1000] * 12
                replies = peer.lock_step(100, pwm, timeout=30.0)
                assert len(replies) == 100
                assert {r['position'][1] for r in replies} == {easts[ns]}
            for ns in peers:
                assert wait_for(lambda: simulator.commands[ns])
                expected = [motor_command(pwms[ns])] * 4
                assert all(c == pytest.approx(expected) for c in simulator.commands[ns])
            for node in (first, second):
                node.send_signal(signal.SIGTERM)
                output, _ = node.communicate(timeout=15)
                assert node.returncode == 0, output
    finally:
        for peer in peers.values():
            peer.close()
        simulator.close()


def child_pids(pid: int) -> List[int]:
    """Return the process ids of pid's children (Linux /proc)."""
    children = []
    for task in os.listdir(f'/proc/{pid}/task'):
        with open(f'/proc/{pid}/task/{task}/children') as stream:
            children += [int(child) for child in stream.read().split()]
    return children


def test_the_link_process_killed_is_said_on_diagnostics_then_the_node_exits_1():
    port = free_udp_port()
    simulator = Simulator({'uav4': 0.0})
    try:
        with reaped(start_node('uav4', port)) as node:
            def link_statuses():
                return [status for report in simulator.diagnostics for status in report.status
                        if status.name == 'uav4/json_sitl_bridge: SITL link']
            assert wait_for(link_statuses, 30.0), node.stdout.read() if node.poll() else ''

            def imu_counted() -> bool:
                return any(status.name == 'uav4/json_sitl_bridge: input imu'
                           and any(v.key == 'messages' and int(v.value) > 0
                                   for v in status.values)
                           for report in simulator.diagnostics for status in report.status)
            assert wait_for(imu_counted, 30.0)    # samples flow into the link process
            (link_process,) = child_pids(node.pid)
            # Stopped first, so that the simulator's samples wait unread in the channel when
            # it dies (the channel then resets rather than ends: the node must see both).
            os.kill(link_process, signal.SIGSTOP)
            time.sleep(0.5)
            os.kill(link_process, signal.SIGKILL)
            output, _ = node.communicate(timeout=15)
        assert node.returncode == 1, output
        assert wait_for(lambda: link_statuses()[-1].level == b'\x02', 5.0)
        assert link_statuses()[-1].message == ('the link process was killed by SIGKILL: SITL '
                                               'is no longer served')
        fatal = [line for line in output.splitlines() if 'FATAL' in line]
        assert len(fatal) == 1 and 'killed by SIGKILL' in fatal[0], output
        assert 'Traceback' not in output
        # The port is free again.
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.bind(('127.0.0.1', port))
        probe.close()
    finally:
        simulator.close()


def test_a_misspelled_parameter_is_one_fatal_line_and_exit_1():
    result = subprocess.run(
        [sys.executable, '-m', 'ardupilot_json_bridge.cli', 'node', '--ros-args', '--params-file',
         CONFIG, '-p', 'imu_tpoic:=imu', '-p', f'port:={free_udp_port()}'],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert 'imu_tpoic: unknown parameter; did you mean imu_topic?' in result.stderr
    assert 'Traceback' not in result.stdout + result.stderr


def test_gazebo_preset_publishes_real_actuator_msgs():
    actuator_msgs = pytest.importorskip(
        'actuator_msgs.msg', reason='needs actuator_msgs (ROS 2, or generated by '
                                    'test/interfaces/build.sh as CI does)')
    port = free_udp_port()
    received = []
    simulator = Simulator({'uav1': 0.0}, actuator_msgs.Actuators,
                          lambda message: received.append(message) or [])
    peer = SitlPeer(port)
    gazebo_preset = os.path.join(os.path.dirname(CONFIG), 'quad_x.yaml')
    command = [sys.executable, '-m', 'ardupilot_json_bridge.cli', 'node', '--ros-args', '-r',
               '__ns:=/uav1', '--params-file', gazebo_preset, '-p', 'use_sim_time:=true', '-p',
               f'port:={port}']
    try:
        # Each frame's own PWM, so that each new frame's commands go out and say which frame
        # they are (the rotor commands of frame k, first rotor's).
        pwms = [[1200 + 5 * k, 1500, 1300, 1100] + [1000] * 12 for k in range(100)]
        with reaped(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)) as node:
            replies = [reply for pwm in pwms
                       for reply in peer.lock_step(1, pwm, timeout=30.0)]
            assert len(replies) == 100
            # The last frame's commands came (a reliable depth-10 queue may drop some between).
            last = motor_command(pwms[-1][0])
            assert wait_for(lambda: received and abs(received[-1].velocity[0] - last) < 1e-6)
            node.send_signal(signal.SIGTERM)
            output, _ = node.communicate(timeout=15)
        assert node.returncode == 0 and 'refused' not in output, output
        message = received[-1]
        assert list(message.velocity) == pytest.approx(
            [motor_command(pwm) for pwm in pwms[-1][:4]])
        assert len(message.position) == 0 and len(message.normalized) == 0
        # Stamped with the physics time of the reply SITL computed the frame's PWM from: frame
        # k's commands with reply k - 1's instant. Reply k describes the simulator's time at
        # the session's first frame (one of its 4 ms steps) plus its timestamp (k / 1200 s on
        # SITL's frame grid), and later by whole frames more where the node passed physics
        # over (a SITL falling behind a simulator that runs on): every command's stamp less
        # reply k - 1's timestamp is that first instant, or later by whole frames. (The
        # node's /clock, 4 ms steps paced by the wall clock, is not.)
        first_rotor = [motor_command(pwm[0]) for pwm in pwms]
        bases = []
        for command_message in received:
            frame = min(range(100),
                        key=lambda k: abs(first_rotor[k] - command_message.velocity[0]))
            if frame == 0:
                continue                # before any reply: no physics time yet
            stamp = command_message.header.stamp
            bases.append(stamp.sec + stamp.nanosec * 1e-9 - replies[frame - 1]['timestamp'])
        assert len(bases) >= 20, len(bases)
        frames_passed_over = [(later - base) * 1200 for base, later in zip(bases, bases[1:])]
        assert all(frames > -2e-3 and abs(frames - round(frames)) < 2e-3
                   for frames in frames_passed_over), frames_passed_over
        steps = bases[0] / STEP
        assert bases[0] > 0 and steps == pytest.approx(round(steps), abs=1e-3)
        assert message.header.frame_id == 'base_link'
    finally:
        peer.close()
        simulator.close()


def drain(peer: SitlPeer) -> None:
    """Read away replies to frames the peer sent again while waiting (each gets one)."""
    while peer.receive(0.3) is not None:
        pass


def statuses_of(simulator: 'Simulator', name: str) -> List[Any]:
    return [status for report in list(simulator.diagnostics) for status in report.status
            if status.name == name]


def test_odometry_on_the_wall_clock_is_one_error_and_replies_resume_on_the_imus_clock():
    # /clock and the IMU on simulated time, the odometry stamped with the wall clock: no frame
    # can be answered (and none may hang the link), one ERROR line and a /diagnostics ERROR
    # name both clocks and the fix; back on simulated time, replies resume at once.
    port = free_udp_port()
    simulator = Simulator({'uav1': 3.0})
    peer = SitlPeer(port)
    try:
        with reaped(start_node('uav1', port)) as node:
            assert len(peer.lock_step(20, [1500] * 16, timeout=30.0)) == 20
            simulator.odometry_on_wall_clock = True
            drain(peer)
            assert peer.lock_step(1, [1500] * 16, timeout=3.0) == []

            def odometry_errors():
                return [s for s in statuses_of(simulator, 'uav1/json_sitl_bridge: input odometry')
                        if s.level == b'\x02']
            assert wait_for(odometry_errors), [s.message for s in statuses_of(
                simulator, 'uav1/json_sitl_bridge: input odometry')]
            message = odometry_errors()[-1].message
            assert 'wall-clock time' in message and 'IMU' in message, message
            assert 'use_sim_time:=true' in message, message
            simulator.odometry_on_wall_clock = False
            replies = peer.lock_step(20, [1500] * 16, timeout=10.0)
            assert len(replies) == 20
            assert replies[-1]['position'] == pytest.approx((0.0, 3.0, 0.0))
            node.send_signal(signal.SIGTERM)
            output, _ = node.communicate(timeout=15)
        assert node.returncode == 0, output
        errors = [line for line in output.splitlines() if 'ERROR' in line]
        assert 1 <= len(errors) <= 2, output[-3000:]     # rate-limited: one per 5 s
        assert 'odometry stamps are' in errors[0] and 'simulated time' in errors[0], errors
    finally:
        peer.close()
        simulator.close()


def test_a_simulator_that_resets_its_clock_mid_flight_is_followed_and_named():
    port = free_udp_port()
    simulator = Simulator({'uav1': 3.0}, start=20.0)
    peer = SitlPeer(port)
    try:
        # A patient SITL: a peer in Python may lag the simulator, and must not skip ahead here.
        with reaped(start_node('uav1', port, True, 'max_backlog:=10.0')) as node:
            assert len(peer.lock_step(20, [1500] * 16, timeout=30.0)) == 20
            drain(peer)     # replies to the first frame, sent again while the node started
            replies = peer.lock_step(200, [1500] * 16, timeout=30.0)
            # The clock goes back while the peer steps on, so while a frame waits for physics.
            jump = threading.Timer(0.1, simulator.jump_back, args=(15.0,))
            jump.start()
            replies += peer.lock_step(600, [1500] * 16, timeout=30.0)
            jump.join()
            assert wait_for(lambda: simulator.jumps == 1)
            node.send_signal(signal.SIGTERM)
            output, _ = node.communicate(timeout=15)
        assert len(replies) == 800, output[-3000:]
        steps = [(b['timestamp'] - a['timestamp']) * 1200 for a, b in zip(replies, replies[1:])]
        # SITL's clock steps by exactly one frame, across the reset too.
        odd = [(i, step) for i, step in enumerate(steps) if step != pytest.approx(1.0)]
        assert not odd, (odd, output[-3000:])
        assert 'physics time went back from' in output, output[-3000:]
        assert 'paused or stopped' not in output, output[-3000:]
    finally:
        peer.close()
        simulator.close()


EXECUTOR_AT_RCLPY_SHUTDOWN = """
import gc, os, signal, threading
import rclpy
from rclpy.executors import Executor
from ardupilot_json_bridge.ros.node import run_node

shutdown = rclpy.try_shutdown


def counting_shutdown(**kwargs):
    live = [o for o in gc.get_objects() if isinstance(o, Executor) and o._sigint_gc is not None]
    print('executors live at rclpy shutdown:', len(live))
    shutdown(**kwargs)


def ticking_node():
    node = rclpy.create_node('stopping')
    node.create_timer(0.01, lambda: None)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    return node


rclpy.try_shutdown = counting_shutdown
print('exit', run_node(ticking_node, 'stopping', ()))
"""


def test_run_node_shuts_its_executor_down_before_rclpy():
    """
    The node's main shuts its executor down while rclpy is up, not at exit.

    An executor left to the garbage collector was destroyed after rclpy at random, and printed
    a traceback from Executor.__del__ (InvalidHandle: destruction was requested) at exit.
    """
    result = subprocess.run([sys.executable, '-c', EXECUTOR_AT_RCLPY_SHUTDOWN],
                            capture_output=True, text=True, timeout=60)
    lines = result.stdout.splitlines()
    assert lines[-1:] == ['exit 0'], result.stdout + result.stderr
    assert set(lines[:-1]) == {'executors live at rclpy shutdown: 0'}, result.stdout
    assert 'Traceback' not in result.stderr, result.stderr


SIGNAL_STORM = """
import sys
import rclpy
from ardupilot_json_bridge.ros.node import run_node


def ticking_node():
    node = rclpy.create_node('storm')
    node.create_timer(0.01, lambda: None)
    print('up', flush=True)
    return node


sys.exit(run_node(ticking_node, 'storm', ()))
"""


def without_cpython_signal_race(output: str) -> str:
    """
    Return output less CPython's own report of a signal that raced its handler's change.

    A signal landing while SIG_IGN replaces the handler may still be pending for Python, which
    then raises OSError('Signal N ignored due to race condition') wherever the main thread runs
    next, even after main returned (in threading's shutdown; exit status 0). Wakeup.
    ignore_signals takes those pending when it sets SIG_IGN; in a storm of 2000 some still
    come (1 run in 4 here, 2026-11-28). It is the interpreter's report, not the node's.
    """
    race = re.compile(r'Traceback \(most recent call last\):\n(?:(?:  .*)?\n)+?'
                      r'OSError: Signal \d+ ignored due to race condition\n')
    output = race.sub('', output)
    # Two threads' reports may come interleaved line by line (2026-11-29, Humble): where every
    # traceback left has its race line and no other exception is told, they are those reports.
    headers = re.findall(r'^Traceback \(most recent call last\):$', output, re.MULTILINE)
    races = re.findall(r'^OSError: Signal \d+ ignored due to race condition$', output,
                       re.MULTILINE)
    others = [line for line in re.findall(r'^\w+(?:Error|Exception|Interrupt)\b.*$', output,
                                          re.MULTILINE)
              if not re.match(r'OSError: Signal \d+ ignored due to race condition$', line)]
    if headers and len(headers) == len(races) and not others:
        output = re.sub(r'^Traceback \(most recent call last\):\n', '', output,
                        flags=re.MULTILINE)
    return output


def test_a_storm_of_signals_ends_the_node_cleanly():
    """
    End the node with exit 0 whenever signals land, through its cleanup and Python's exit.

    The handlers take no lock, and a late SIGTERM is ignored, not fatal.
    """
    for attempt in range(5):
        process = subprocess.Popen([sys.executable, '-c', SIGNAL_STORM],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with reaped(process):
            assert process.stdout.readline().strip() == 'up', process.stdout.read()
            time.sleep(0.2)
            for number in [signal.SIGTERM, signal.SIGINT] * 1000:
                try:
                    os.kill(process.pid, number)
                except ProcessLookupError:
                    break
            output, _ = process.communicate(timeout=20)
        assert process.returncode == 0, (attempt, process.returncode, output)
        assert 'Traceback' not in without_cpython_signal_race(output), output
