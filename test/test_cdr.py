"""
The raw CDR decoder against serializers written by others.

rosbags' serializer and, where ROS 2 is installed, rclpy's own (the bytes a raw subscription
receives).
"""

import math

from hypothesis import given, settings, strategies as st
import numpy as np
import pytest

from ardupilot_json_bridge.core.samples import InvalidSample
from ardupilot_json_bridge.messages import cdr
import ros_messages

STORE = ros_messages.STORES['jazzy']
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
# Frame ids of every length modulo 8 move the doubles that follow across alignments.
frame_ids = st.text(alphabet='abcdefghijklmnopqrstuvwxyz_/0123456789', max_size=19)
vectors = st.tuples(finite, finite, finite)


def filled(count: int) -> np.ndarray:
    """Covariances full of values the decoder must skip, not read."""
    return np.full(count, 7.25)


def imu_message(stamp, frame_id, orientation, gyro, accel):
    message = ros_messages.imu(STORE, 0.0, gyro, accel)
    message.header.stamp.sec, message.header.stamp.nanosec = stamp
    message.header.frame_id = frame_id
    message.orientation = STORE.types['geometry_msgs/msg/Quaternion'](*orientation)
    message.orientation_covariance = filled(9)
    message.linear_acceleration_covariance = filled(9)
    return message


def odometry_message(stamp, frame_id, child, position, orientation, linear, angular):
    message = ros_messages.odometry(STORE, 0.0, position, orientation, linear, angular)
    message.header.stamp.sec, message.header.stamp.nanosec = stamp
    message.header.frame_id, message.child_frame_id = frame_id, child
    message.pose.covariance = filled(36)
    message.twist.covariance = filled(36)
    return message


stamps = st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(0, 999_999_999))


@settings(max_examples=300, deadline=None)
@given(stamps, frame_ids, st.tuples(finite, finite, finite, finite), vectors, vectors,
       st.booleans())
def test_imu_fields_match_rosbags_serialization(stamp, frame_id, orientation, gyro, accel,
                                                little_endian):
    message = imu_message(stamp, frame_id, orientation, gyro, accel)
    data = bytes(STORE.serialize_cdr(message, 'sensor_msgs/msg/Imu',
                                     little_endian=little_endian))
    decoded = cdr.decode_imu(data)
    assert tuple(decoded.header.stamp) == stamp
    assert decoded.header.frame_id == frame_id
    assert tuple(decoded.orientation) == orientation
    assert tuple(decoded.angular_velocity) == gyro
    assert tuple(decoded.linear_acceleration) == accel


@settings(max_examples=300, deadline=None)
@given(stamps, frame_ids, frame_ids, vectors, st.tuples(finite, finite, finite, finite),
       vectors, vectors, st.booleans())
def test_odometry_fields_match_rosbags_serialization(stamp, frame_id, child, position,
                                                     orientation, linear, angular,
                                                     little_endian):
    message = odometry_message(stamp, frame_id, child, position, orientation, linear, angular)
    data = bytes(STORE.serialize_cdr(message, 'nav_msgs/msg/Odometry',
                                     little_endian=little_endian))
    decoded = cdr.decode_odometry(data)
    assert tuple(decoded.header.stamp) == stamp
    assert (decoded.header.frame_id, decoded.child_frame_id) == (frame_id, child)
    assert tuple(decoded.pose.pose.position) == position
    assert tuple(decoded.pose.pose.orientation) == orientation
    assert tuple(decoded.twist.twist.linear) == linear
    assert tuple(decoded.twist.twist.angular) == angular


def test_the_bytes_rclpy_hands_a_raw_subscription_decode_the_same():
    serialization = pytest.importorskip('rclpy.serialization',
                                        reason="needs ROS 2 (rclpy): pip install '.[jazzy]'")
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import Imu
    imu = Imu()
    imu.header.stamp.sec, imu.header.stamp.nanosec = 12, 345
    imu.header.frame_id = 'imu_link'
    imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = 0.1, -0.2, 0.3
    imu.linear_acceleration.z = 9.80665
    imu.orientation_covariance[0] = -1.0
    decoded = cdr.decode_imu(serialization.serialize_message(imu))
    assert decoded.header == cdr.Header(cdr.Time(12, 345), 'imu_link')
    assert decoded.angular_velocity == (0.1, -0.2, 0.3)
    assert decoded.linear_acceleration == (0.0, 0.0, 9.80665)
    odometry = Odometry()
    odometry.header.frame_id, odometry.child_frame_id = 'odom', 'base_link_x'
    odometry.pose.pose.position.x = 4.5
    odometry.pose.pose.orientation.w = 1.0
    odometry.twist.twist.angular.z = -0.75
    odometry.pose.covariance[35] = 99.0
    decoded = cdr.decode_odometry(serialization.serialize_message(odometry))
    assert decoded.child_frame_id == 'base_link_x'
    assert decoded.pose.pose.position == (4.5, 0.0, 0.0)
    assert decoded.pose.pose.orientation == (0.0, 0.0, 0.0, 1.0)
    assert decoded.twist.twist.angular == (0.0, 0.0, -0.75)


def imu_bytes() -> bytes:
    message = imu_message((1, 2), 'imu', (0.0, 0.0, 0.0, 1.0), (0.1, 0.2, 0.3), (0, 0, 9.8))
    return bytes(STORE.serialize_cdr(message, 'sensor_msgs/msg/Imu'))


@pytest.mark.parametrize('data, words', [
    (b'', 'encapsulation'),
    (b'\x00\x02\x00\x00' + imu_bytes()[4:], 'encapsulation'),  # CDR2: not what ROS 2 sends
    (imu_bytes()[:40], 'truncated'),
    (imu_bytes()[:-1], 'truncated'),
    (imu_bytes()[:12] + b'\xff\xff\x00\x00' + imu_bytes()[16:], 'does not fit'),
    (imu_bytes()[:12] + b'\x00\x00\x00\x00' + imu_bytes()[16:], 'string length 0'),
])
def test_malformed_messages_are_named_not_raised_raw(data, words):
    with pytest.raises(InvalidSample, match=words):
        cdr.decode_imu(data)


def test_odometry_bytes_are_not_an_imu():
    message = odometry_message((0, 0), 'odom', 'base', (1, 2, 3), (0, 0, 0, 1), (0, 0, 0),
                               (0, 0, 0))
    data = bytes(STORE.serialize_cdr(message, 'nav_msgs/msg/Odometry'))
    with pytest.raises(InvalidSample):
        cdr.decode_imu(data[:60])
    assert not math.isnan(cdr.decode_odometry(data).pose.pose.position.x)
