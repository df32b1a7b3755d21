"""The struct CDR writer against rosbags' serializer: the same bytes for the same message."""

from hypothesis import given, settings, strategies as st
import numpy as np

from ardupilot_json_bridge.messages import cdr_writer
from ardupilot_json_bridge.messages.servo_pwm import encode_servo_pwm, SERVO_PWM_TYPE
import ros_messages

STORE = ros_messages.STORES['jazzy']
TYPES = STORE.types
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
# Frame ids of every length modulo 8 move the doubles that follow across alignments.
frame_ids = st.text(alphabet='abcdefghijklmnopqrstuvwxyz_/0123456789', max_size=19)
vectors = st.tuples(finite, finite, finite)
quaternions = st.tuples(finite, finite, finite, finite)
# Physics time in nanoseconds, up to 11 days: a float64 of seconds still holds every one.
stamps_ns = st.integers(0, 10**15)


def time_of(stamp_ns: int):
    return TYPES['builtin_interfaces/msg/Time'](sec=stamp_ns // 10**9,
                                                nanosec=stamp_ns % 10**9)


def header(stamp_ns: int, frame_id: str):
    return TYPES['std_msgs/msg/Header'](stamp=time_of(stamp_ns), frame_id=frame_id)


def vector(values):
    return TYPES['geometry_msgs/msg/Vector3'](*values)


def quaternion(values):
    return TYPES['geometry_msgs/msg/Quaternion'](*values)


def rosbags_bytes(message, msgtype: str) -> bytes:
    return bytes(STORE.serialize_cdr(message, msgtype))


@settings(max_examples=200, deadline=None)
@given(stamps_ns, frame_ids, quaternions, vectors, vectors)
def test_imu(stamp_ns, frame_id, orientation, rates, force):
    expected = TYPES['sensor_msgs/msg/Imu'](
        header=header(stamp_ns, frame_id), orientation=quaternion(orientation),
        orientation_covariance=np.zeros(9), angular_velocity=vector(rates),
        angular_velocity_covariance=np.zeros(9), linear_acceleration=vector(force),
        linear_acceleration_covariance=np.zeros(9))
    assert cdr_writer.encode_imu(stamp_ns / 1e9, frame_id, orientation, rates, force) == \
        rosbags_bytes(expected, 'sensor_msgs/msg/Imu')


@settings(max_examples=200, deadline=None)
@given(stamps_ns, frame_ids, frame_ids, vectors, quaternions, vectors, vectors)
def test_odometry(stamp_ns, frame_id, child, position, orientation, linear, angular):
    pose = TYPES['geometry_msgs/msg/Pose'](
        position=TYPES['geometry_msgs/msg/Point'](*position), orientation=quaternion(orientation))
    twist = TYPES['geometry_msgs/msg/Twist'](linear=vector(linear), angular=vector(angular))
    expected = TYPES['nav_msgs/msg/Odometry'](
        header=header(stamp_ns, frame_id), child_frame_id=child,
        pose=TYPES['geometry_msgs/msg/PoseWithCovariance'](pose=pose, covariance=np.zeros(36)),
        twist=TYPES['geometry_msgs/msg/TwistWithCovariance'](twist=twist,
                                                             covariance=np.zeros(36)))
    assert cdr_writer.encode_odometry(stamp_ns / 1e9, frame_id, child, position, orientation,
                                      linear, angular) == \
        rosbags_bytes(expected, 'nav_msgs/msg/Odometry')


@settings(max_examples=200, deadline=None)
@given(stamps_ns)
def test_clock(stamp_ns):
    expected = TYPES['rosgraph_msgs/msg/Clock'](clock=time_of(stamp_ns))
    assert cdr_writer.encode_clock(stamp_ns / 1e9) == \
        rosbags_bytes(expected, 'rosgraph_msgs/msg/Clock')


def layout():
    return TYPES['std_msgs/msg/MultiArrayLayout'](dim=[], data_offset=0)


@settings(max_examples=100, deadline=None)
@given(st.lists(finite, max_size=20))
def test_float64_array(values):
    expected = TYPES['std_msgs/msg/Float64MultiArray'](
        layout=layout(), data=np.array(values, dtype=np.float64))
    assert cdr_writer.encode_float64_array(values) == \
        rosbags_bytes(expected, 'std_msgs/msg/Float64MultiArray')


@settings(max_examples=100, deadline=None)
@given(stamps_ns, frame_ids, st.lists(st.integers(0, 65535), max_size=20))
def test_servo_pwm(stamp_ns, frame_id, values):
    expected = TYPES['sensor_msgs/msg/JointState'](
        header=header(stamp_ns, frame_id), name=[f'servo{n + 1}' for n in range(len(values))],
        position=np.array(values, dtype=np.float64), velocity=np.array([], dtype=np.float64),
        effort=np.array([], dtype=np.float64))
    assert encode_servo_pwm(stamp_ns * 1e-9, values, frame_id) == \
        rosbags_bytes(expected, SERVO_PWM_TYPE)
