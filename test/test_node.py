"""The ROS 2 node with real rclpy (run where ROS 2 is sourced; skipped elsewhere)."""

import math
import threading
import time

import pytest

rclpy = pytest.importorskip('rclpy', reason='needs ROS 2 (Humble or Jazzy) sourced')

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402, I100, I202
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Imu, JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402

from ardupilot_json_bridge.config import ConfigError  # noqa: E402
from ardupilot_json_bridge.ros.node import JsonSitlBridge  # noqa: E402
from conftest import free_udp_port  # noqa: E402
from sitl_peer import parse_reply, SitlPeer  # noqa: E402

NORTH = (0.0, 0.0, math.sin(math.pi / 4), math.cos(math.pi / 4))
RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
BEST_EFFORT = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)


@pytest.fixture(scope='module', autouse=True)
def ros():
    rclpy.init()
    yield
    rclpy.shutdown()


class Harness:
    """Bridge nodes, a simulator stand-in node and an executor spinning them in a thread."""

    def __init__(self) -> None:
        self.executor = MultiThreadedExecutor()
        self.sim = rclpy.create_node('fake_simulator')
        self.executor.add_node(self.sim)
        self.nodes = [self.sim]
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def bridge(self, namespace: str = '', **parameters) -> JsonSitlBridge:
        overrides = [Parameter(name, value=value) for name, value in parameters.items()]
        node = JsonSitlBridge(namespace=namespace, parameter_overrides=overrides)
        self.executor.add_node(node)
        self.nodes.append(node)
        return node

    def publish_motion(self, namespace: str, stamp: float, x: float) -> None:
        if not hasattr(self, '_publishers'):
            self._publishers = {}
        key = namespace
        if key not in self._publishers:
            prefix = f'/{namespace}/' if namespace else '/'
            self._publishers[key] = (
                self.sim.create_publisher(Odometry, prefix + 'odom', RELIABLE),
                self.sim.create_publisher(Imu, prefix + 'imu', BEST_EFFORT))
        odom_publisher, imu_publisher = self._publishers[key]
        odometry = Odometry()
        odometry.header.stamp.sec = int(stamp)
        odometry.header.stamp.nanosec = int(round((stamp % 1) * 1e9))
        odometry.pose.pose.position.x = x
        odometry.pose.pose.position.z = 2.0
        (odometry.pose.pose.orientation.x, odometry.pose.pose.orientation.y,
         odometry.pose.pose.orientation.z, odometry.pose.pose.orientation.w) = NORTH
        odometry.twist.twist.linear.x = 1.0
        odometry.twist.twist.angular.z = 0.1
        imu = Imu()
        imu.header.stamp = odometry.header.stamp
        imu.angular_velocity.z = 0.1
        imu.linear_acceleration.z = 9.80665
        odom_publisher.publish(odometry)
        imu_publisher.publish(imu)

    def close(self) -> None:
        self.executor.shutdown()
        self.thread.join(5.0)   # no callback left running into destroyed nodes
        for node in self.nodes:
            node.destroy_node()


@pytest.fixture
def harness():
    h = Harness()
    yield h
    h.close()


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def serve(harness, peer, namespace, x, steps=20, timeout=10.0):
    """Publish fresh samples and step the peer until it has `steps` replies."""
    replies, stamp, deadline = [], 100.0, time.monotonic() + timeout
    while len(replies) < steps and time.monotonic() < deadline:
        stamp += 0.01
        harness.publish_motion(namespace, stamp, x)
        peer.send()
        datagram = peer.receive(0.2)
        if datagram is not None:
            replies.append(parse_reply(datagram))
            peer.frame_count += 1
    return replies


def test_node_declares_its_parameters(harness):
    node = harness.bridge(port=free_udp_port())
    assert node.get_parameter('instance').value == 0
    descriptor = node.describe_parameters(['instance'])[0]
    assert descriptor.read_only
    assert 'SITL instance' in descriptor.description
    result = node.set_parameters([Parameter('instance', value=3)])[0]
    assert not result.successful
    assert node.set_parameters([Parameter('fresh_timeout', value=0.3)])[0].successful
    # What the link process applied, as it reports it back.
    assert wait_until(lambda: node.link.applied[0].fresh_timeout == 0.3), node.link.applied
    refused = node.set_parameters([Parameter('fresh_timeout', value=-1.0)])[0]
    assert not refused.successful


def test_node_answers_sitl_with_ned_frd_values(harness):
    port = free_udp_port()
    harness.bridge('uav1', port=port)
    peer = SitlPeer(port)
    try:
        replies = serve(harness, peer, 'uav1', x=5.0)
    finally:
        peer.close()
    assert len(replies) == 20
    reply = replies[-1]
    assert reply['position'][1] == pytest.approx(5.0, abs=0.05)     # ENU x is NED east
    assert reply['position'][2] == pytest.approx(-2.0, abs=0.01)
    assert reply['velocity'] == pytest.approx((1.0, 0.0, 0.0), abs=1e-6)  # north
    assert reply['imu.gyro'] == pytest.approx((0.0, 0.0, -0.1))
    assert reply['imu.accel_body'] == pytest.approx((0.0, 0.0, -9.80665))
    assert replies[0]['timestamp'] == 0.0


def test_node_publishes_commands_reliably(harness):
    port = free_udp_port()
    harness.bridge(
        'rover', port=port, output_groups=['wheels'],
        **{'outputs.wheels.type': 'float64_multi_array', 'outputs.wheels.topic': 'wheels',
           'outputs.wheels.channels': [3, 3], 'outputs.wheels.multiplier': 2.0})
    received, pwm = [], []
    harness.sim.create_subscription(Float64MultiArray, '/rover/wheels', received.append,
                                    RELIABLE)
    harness.sim.create_subscription(JointState, '/rover/servo_pwm', pwm.append, RELIABLE)
    peer = SitlPeer(port)
    frame_pwm = [1000, 1000, 2000] + [0] * 13
    try:
        deadline, stamp = time.monotonic() + 10.0, 100.0
        # Both topics: the commands are published before the raw PWM, and a callback of one
        # can run before the other's arrives.
        while not (received and pwm) and time.monotonic() < deadline:
            stamp += 0.01
            harness.publish_motion('rover', stamp, 0.0)
            peer.send(pwm=frame_pwm)
            if peer.receive(0.2) is not None:
                peer.frame_count += 1
    finally:
        peer.close()
    assert received, (f'no command in 10 s: {peer.frame_count} frames answered, link '
                      f'{harness.nodes[-1].link.stats.summary()}')
    assert list(received[-1].data) == [2.0, 2.0]
    assert pwm and list(pwm[-1].position)[:3] == [1000, 1000, 2000]


def test_servo_pwm_carries_every_new_frame_and_the_commands_are_throttled(harness):
    port = free_udp_port()
    harness.bridge('rec', port=port, output_groups=['wheels'],
                   **{'outputs.wheels.type': 'float64_multi_array',
                      'outputs.wheels.topic': 'wheels', 'outputs.wheels.channels': [3]})
    deep = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    recorded, commands = [], []
    harness.sim.create_subscription(JointState, '/rec/servo_pwm', recorded.append, deep)
    harness.sim.create_subscription(Float64MultiArray, '/rec/wheels', commands.append, deep)
    peer = SitlPeer(port)
    held = [1000, 1000, 1600] + [0] * 13     # SITL holds its outputs: the PWM never changes
    replies = []
    try:
        # (200 frames take a second; a minute leaves room for a machine busy with a CI run's
        # other work, which once answered 189 in 20 s.)
        stamp, deadline = 100.0, time.monotonic() + 60.0
        while len(replies) < 200 and time.monotonic() < deadline:
            stamp += 0.002
            harness.publish_motion('rec', stamp, 0.0)
            peer.send(pwm=held)
            datagram = peer.receive(0.2)
            if datagram is not None:
                replies.append(parse_reply(datagram))
                peer.frame_count += 1
    finally:
        peer.close()
    assert len(replies) == 200
    # Every new frame SITL sent after the first reply is on servo_pwm, once, with its PWM,
    # stamped with the physics time of the reply SITL computed it from: the first frame's
    # reply (at physics time origin, its timestamp 0) stamps the second frame, and so on.
    assert wait_until(lambda: len(recorded) >= peer.frame_count - 1), (len(recorded), replies)
    time.sleep(0.2)
    assert len(recorded) == peer.frame_count - 1
    assert all(list(message.position) == held for message in recorded)
    stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in recorded]
    # (A reply late on a loaded machine comes twice: SITL's resent frame is answered again.)
    served = sorted({r['timestamp'] for r in replies})
    assert [s - stamps[0] for s in stamps] == pytest.approx(served[:len(stamps)], abs=2e-9)
    # The commands: the first frame's, then at most one per 20 ms while the PWM holds.
    assert 1 <= len(commands) < len(recorded)


def test_a_backlog_raised_while_running_is_applied_by_the_link_process(harness):
    # SITL 3 s behind the simulator, max_backlog raised from 0.05 to 5 s while running: the
    # frame must be served from 3 s back, as when 5 s is given at start.
    port = free_udp_port()
    node = harness.bridge('lag', port=port, fresh_timeout=0.2)
    assert node.set_parameters([Parameter('max_backlog', value=5.0)])[0].successful
    assert wait_until(lambda: node.link.applied[1].max_backlog == 5.0)
    assert node.link.applied[2] >= 5.0      # the histories' length, in physics seconds
    peer = SitlPeer(port)
    try:
        stamp, deadline = 100.0, time.monotonic() + 10.0
        while peer.frame_count == 0 and time.monotonic() < deadline:
            stamp += 0.01
            harness.publish_motion('lag', stamp, 1.0)
            peer.send()
            if peer.receive(0.2) is not None:
                peer.frame_count += 1
        assert peer.frame_count == 1
        for k in range(1, 301):              # 3 s of physics, SITL not stepping
            harness.publish_motion('lag', stamp + 0.01 * k, 1.0)
            time.sleep(0.002)
        while peer.receive(0.5) is not None:
            pass                             # replies to frame 0 sent again while it waited
        replies = peer.lock_step(5, timeout=10.0)
    finally:
        peer.close()
    assert len(replies) == 5, node.link.stats.summary()
    assert [r['timestamp'] * 1200 for r in replies] == pytest.approx([1, 2, 3, 4, 5])


def test_node_reports_diagnostics(harness):
    node = harness.bridge('uav3', port=free_udp_port())
    reports = []
    harness.sim.create_subscription(DiagnosticArray, '/diagnostics', reports.append, RELIABLE)
    deadline = time.monotonic() + 5.0
    while not reports and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reports
    names = {status.name: status for status in reports[-1].status}
    link = names['uav3/json_sitl_bridge: SITL link']
    assert 'waiting for SITL' in link.message
    assert names['uav3/json_sitl_bridge: input imu'].level == b'\x02'
    assert node.link.stats.received == 0


def test_diagnostics_before_the_first_clock_are_stamped_with_the_wall_clock(harness):
    node = harness.bridge('early', port=free_udp_port(), use_sim_time=True)
    reports = []
    harness.sim.create_subscription(DiagnosticArray, '/diagnostics', reports.append, RELIABLE)
    assert wait_until(lambda: reports, 5.0)
    assert node.get_clock().now().nanoseconds == 0      # no /clock yet
    stamp = reports[-1].header.stamp
    assert abs(stamp.sec + stamp.nanosec * 1e-9 - time.time()) < 5.0, stamp


def test_a_node_with_no_output_groups_says_so():
    import signal
    import subprocess
    import sys
    process = subprocess.Popen(
        [sys.executable, '-m', 'ardupilot_json_bridge.ros.node', '--ros-args', '-p',
         f'port:={free_udp_port()}'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if 'listening on UDP' in line:
                break
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=15)
    warnings = [line for line in lines + output.splitlines() if 'no output groups' in line]
    assert len(warnings) == 1 and warnings[0].startswith('[WARN]'), lines
    assert 'no actuator command is published' in warnings[0]
    assert process.returncode == 0


def test_two_vehicles_do_not_interfere(harness):
    ports = [free_udp_port(), free_udp_port()]
    for index, port in enumerate(ports):
        harness.bridge(f'uav{index}', port=port, instance=index)
    peers = [SitlPeer(port) for port in ports]
    try:
        results = [serve(harness, peer, f'uav{i}', x=10.0 * (i + 1), steps=10)
                   for i, peer in enumerate(peers)]
    finally:
        for peer in peers:
            peer.close()
    assert results[0][-1]['position'][1] == pytest.approx(10.0, abs=0.05)
    assert results[1][-1]['position'][1] == pytest.approx(20.0, abs=0.05)


def test_recorded_topics_through_the_node_give_the_motion_on_sitls_grid(harness, tmp_path):
    import math
    from rclpy.serialization import deserialize_message
    from ardupilot_json_bridge.core.frames import quaternion_to_euler
    from ardupilot_json_bridge.sources.bagfile import read_messages, typestore
    from ardupilot_json_bridge.sources.sample_bag import SteadyMotion, write_motion_bag

    motion = SteadyMotion(position=(3.0, 4.0, 10.0), velocity=(2.0, -1.0, 0.5), yaw=0.4,
                          yaw_rate=0.2)
    bag = str(tmp_path / 'recorded')
    write_motion_bag(bag, motion, duration=0.25, imu_rate=400.0, odometry_rate=50.0,
                     namespace='rec', start=100.0)
    node_port = free_udp_port()
    harness.bridge('rec', port=node_port, fresh_timeout=0.05, max_backlog=1.0)
    store = typestore('humble')
    publishers = {'/rec/imu': harness.sim.create_publisher(Imu, '/rec/imu', RELIABLE),
                  '/rec/odom': harness.sim.create_publisher(Odometry, '/rec/odom', RELIABLE)}
    classes = {'/rec/imu': Imu, '/rec/odom': Odometry}
    time.sleep(0.5)
    peer = SitlPeer(node_port)
    replies = []
    try:
        for index, message in enumerate(read_messages(bag, publishers)):
            ros_message = deserialize_message(
                bytes(store.serialize_cdr(message.message, message.message.__msgtype__)),
                classes[message.topic])
            publishers[message.topic].publish(ros_message)
            if index == 3:
                time.sleep(0.2)
                replies.append(peer.step(timeout=2.0))
        time.sleep(0.5)
        while True:
            try:
                replies.append(peer.step(timeout=0.3))
            except TimeoutError:
                break
    finally:
        peer.close()
    # From the first IMU samples to the bag's last (0.2475 s), 1200 a second.
    assert 200 <= len(replies) <= 300
    steps = [b['timestamp'] - a['timestamp'] for a, b in zip(replies, replies[1:])]
    assert steps == pytest.approx([1 / 1200] * len(steps), abs=1e-9)
    first = replies[0]
    first_yaw = quaternion_to_euler(first['quaternion'])[2]
    for reply in replies:
        t = reply['timestamp']
        moved = [b - a for a, b in zip(first['position'], reply['position'])]
        east, north, up = (v * t for v in motion.velocity)
        assert moved == pytest.approx((north, east, -up), abs=1e-6)
        yaw = quaternion_to_euler(reply['quaternion'])[2]
        assert math.remainder(yaw - (first_yaw - motion.yaw_rate * t), math.tau) == \
            pytest.approx(0.0, abs=1e-6)
        assert reply['imu.gyro'] == pytest.approx((0.0, 0.0, -motion.yaw_rate), abs=1e-6)


def test_an_absolute_topic_is_taken_and_remapped(harness):
    # A ros_gz world's absolute odometry topic, remapped onto the stand-in's /abs/odom.
    port = free_udp_port()
    node = JsonSitlBridge(namespace='abs', cli_args=[
        '--ros-args', '-r', '/model/quad/odometry:=/abs/odom', '-p', f'port:={port}',
        '-p', 'odom_topic:=/model/quad/odometry'])
    harness.executor.add_node(node)
    harness.nodes.append(node)
    topics = {s.topic_name for s in node.subscriptions}
    assert '/abs/odom' in topics and '/model/quad/odometry' not in topics, topics
    assert node.monitor.topics['odometry'] == '/abs/odom'
    peer = SitlPeer(port)
    try:
        replies = serve(harness, peer, 'abs', 5.0)
    finally:
        peer.close()
    # The stand-in's position (5 m east, 2 m up: NED (0, 5, -2)). Its odometry says 1 m/s
    # north: where a frame's instant is past the last odometry sample that arrived (a busy
    # machine delays it), the bridge carries the position on by that velocity (13 mm once).
    assert replies and replies[-1]['position'] == pytest.approx((0.0, 5.0, -2.0), abs=0.05)


def test_actuators_group_is_refused_without_actuator_msgs(harness, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, 'actuator_msgs', None)
    monkeypatch.setitem(sys.modules, 'actuator_msgs.msg', None)
    node = harness.bridge(
        'bare', port=free_udp_port(), output_groups=['motors', 'wheels'],
        **{'outputs.motors.type': 'actuators', 'outputs.motors.channels': [1, 2, 3, 4],
           'outputs.wheels.type': 'float64_multi_array', 'outputs.wheels.channels': [3]})
    assert node.classes.actuators is None
    assert [group.name for group in node.groups] == ['wheels']
    assert set(node.command_publishers) == {'wheels'}


@pytest.mark.parametrize('arguments,message', [
    (['-p', 'instance:=-3'], 'out of range'),
    # The descriptor's range is the ports': 9002 + 10 x 5654 is past 65535.
    (['-p', 'instance:=5654'], 'out of range'),
    (['-p', 'odom_topic:=bad topic'], 'Invalid topic name'),
    (['-p', 'port:=PORT'], 'is already in use'),
    # rcl refusing its arguments in rclpy.init: an RCLError traceback.
    (['--params-file', '/nonexistent/quad_x.yaml'], "Couldn't parse params file"),
])
def test_bad_start_is_one_fatal_line_and_exit_1(arguments, message):
    import socket
    import subprocess
    import sys
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.bind(('127.0.0.1', 0))
    port = str(holder.getsockname()[1])
    try:
        result = subprocess.run(
            [sys.executable, '-m', 'ardupilot_json_bridge.ros.node', '--ros-args',
             *[a.replace('PORT', port) for a in arguments]],
            capture_output=True, text=True, timeout=30)
    finally:
        holder.close()
    assert result.returncode == 1
    assert 'FATAL' in result.stderr and message in result.stderr
    assert 'Traceback' not in result.stderr


@pytest.mark.parametrize('name, value, message', [
    ('imu_tpoic', 'imu', 'imu_tpoic: unknown parameter; did you mean imu_topic?'),
    ('outputs.motors.multiplyer', 838.0,
     'outputs.motors.multiplyer: unknown setting; did you mean multiplier?'),
])
def test_misspelled_parameters_are_refused(name, value, message):
    overrides = [Parameter('output_groups', value=['motors']),
                 Parameter('outputs.motors.type', value='float64_multi_array'),
                 Parameter('outputs.motors.topic', value='motors'),
                 Parameter('outputs.motors.channels', value=[1, 2, 3, 4]),
                 Parameter('port', value=free_udp_port()), Parameter(name, value=value)]
    with pytest.raises(ConfigError) as error:
        JsonSitlBridge(parameter_overrides=overrides)
    assert message in str(error.value)
