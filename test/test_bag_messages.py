"""The sample bags' messages: stamps split by hand, fields where ROS puts them."""

import pytest

from ardupilot_json_bridge.sources import bag_messages
import ros_messages

STORE = ros_messages.STORES['jazzy']


@pytest.mark.parametrize('seconds, expected', [
    (0.0, (0, 0)),
    (2.5, (2, 500_000_000)),
    (0.9999999999, (1, 0)),          # the nanoseconds round up into the next second
    (1.0000000004, (1, 0)),
    (12.000000001, (12, 1)),
])
def test_stamps_split_into_seconds_and_nanoseconds(seconds, expected):
    stamp = bag_messages.time_message(STORE, seconds)
    assert (stamp.sec, stamp.nanosec) == expected


def test_imu_and_odometry_fields():
    imu = bag_messages.imu_message(STORE, 1.5, (0.1, 0.2, 0.3, 0.9), (1, 2, 3), (4, 5, 6))
    assert (imu.header.stamp.sec, imu.header.frame_id) == (1, 'imu_link')
    assert (imu.orientation.x, imu.orientation.w) == (0.1, 0.9)
    assert (imu.angular_velocity.z, imu.linear_acceleration.x) == (3.0, 4.0)
    odometry = bag_messages.odometry_message(STORE, 2.0, (7, 8, 9), (0, 0, 0.6, 0.8),
                                             (1, 0, 0), (0, 0, 0.5))
    assert (odometry.header.frame_id, odometry.child_frame_id) == ('odom', 'base_link')
    assert (odometry.pose.pose.position.y, odometry.pose.pose.orientation.z) == (8.0, 0.6)
    assert (odometry.twist.twist.linear.x, odometry.twist.twist.angular.z) == (1.0, 0.5)
