"""
Serialized sensor_msgs/Imu and nav_msgs/Odometry (CDR) to objects with ROS field names.

The node takes its two fast topics raw (rclpy's raw=True) and hands the bytes to the link
process, which decodes them here: rclpy's own conversion builds a Python message of numpy
covariance arrays for every sample, which on a 1 kHz IMU costs the node more than all else.
Both layouts have been fixed since ROS 2's first release: a header whose frame_id string
shifts what follows, then float64 fields at 8-byte alignment. Only the fields the bridge
reads are unpacked; covariances are skipped. Decoding is pure struct, no ROS.
"""

import struct
from typing import NamedTuple, Tuple

from ardupilot_json_bridge.core.samples import InvalidSample

# The encapsulation header's second byte: 0 big-endian, 1 little-endian (plain CDR).
BYTE_ORDERS = {0: '>', 1: '<'}
ENCAPSULATION_SIZE = 4
COVARIANCE_3X3 = 9 * 8
COVARIANCE_6X6 = 36 * 8


class Time(NamedTuple):
    sec: int
    nanosec: int


class Header(NamedTuple):
    stamp: Time
    frame_id: str


class Vector3(NamedTuple):
    x: float
    y: float
    z: float


class Quaternion(NamedTuple):
    x: float
    y: float
    z: float
    w: float


class Imu(NamedTuple):
    """sensor_msgs/Imu without its covariances."""

    header: Header
    orientation: Quaternion
    angular_velocity: Vector3
    linear_acceleration: Vector3


class Pose(NamedTuple):
    position: Vector3
    orientation: Quaternion


class PoseWithCovariance(NamedTuple):
    pose: Pose


class Twist(NamedTuple):
    linear: Vector3
    angular: Vector3


class TwistWithCovariance(NamedTuple):
    twist: Twist


class Odometry(NamedTuple):
    """nav_msgs/Odometry without its covariances."""

    header: Header
    child_frame_id: str
    pose: PoseWithCovariance
    twist: TwistWithCovariance


# Past the header (and the child frame), 8-byte aligned: the doubles read, covariances skipped
# (but required: a message cut short is refused).
IMU_BODY = {order: struct.Struct(
    f'{order}4d{COVARIANCE_3X3}x3d{COVARIANCE_3X3}x3d{COVARIANCE_3X3}x')
            for order in BYTE_ORDERS.values()}
ODOMETRY_BODY = {order: struct.Struct(f'{order}3d4d{COVARIANCE_6X6}x3d3d{COVARIANCE_6X6}x')
                 for order in BYTE_ORDERS.values()}
STAMP = {order: struct.Struct(f'{order}iI') for order in BYTE_ORDERS.values()}
LENGTH = {order: struct.Struct(f'{order}I') for order in BYTE_ORDERS.values()}


def _byte_order(data: bytes) -> str:
    if len(data) < ENCAPSULATION_SIZE or data[0] != 0 or data[1] not in BYTE_ORDERS:
        raise InvalidSample(f'not a plain CDR message (encapsulation {bytes(data[:4])!r})')
    return BYTE_ORDERS[data[1]]


def _string(data: bytes, offset: int, order: str, field: str) -> Tuple[str, int]:
    """Read a CDR string at offset (aligned length, bytes with NUL): text, next offset."""
    offset += -(offset - ENCAPSULATION_SIZE) % 4
    (length,) = LENGTH[order].unpack_from(data, offset)
    start, end = offset + 4, offset + 4 + length
    if length == 0 or end > len(data):
        raise InvalidSample(f'{field}: string length {length} does not fit the message')
    return bytes(data[start:end - 1]).decode('utf-8', 'replace'), end


def _aligned8(offset: int) -> int:
    return offset + (-(offset - ENCAPSULATION_SIZE) % 8)


def _header(data: bytes, order: str) -> Tuple[Header, int]:
    sec, nanosec = STAMP[order].unpack_from(data, ENCAPSULATION_SIZE)
    frame_id, offset = _string(data, ENCAPSULATION_SIZE + 8, order, 'header.frame_id')
    return Header(Time(sec, nanosec), frame_id), offset


def decode_imu(data: bytes) -> Imu:
    """Decode a serialized sensor_msgs/Imu; InvalidSample if it is not one."""
    try:
        order = _byte_order(data)
        header, offset = _header(data, order)
        values = IMU_BODY[order].unpack_from(data, _aligned8(offset))
    except struct.error as error:
        raise InvalidSample(f'truncated sensor_msgs/Imu ({len(data)} bytes): {error}') from None
    return Imu(header, Quaternion(*values[0:4]), Vector3(*values[4:7]), Vector3(*values[7:10]))


def decode_odometry(data: bytes) -> Odometry:
    """Decode a serialized nav_msgs/Odometry; InvalidSample if it is not one."""
    try:
        order = _byte_order(data)
        header, offset = _header(data, order)
        child_frame_id, offset = _string(data, offset, order, 'child_frame_id')
        values = ODOMETRY_BODY[order].unpack_from(data, _aligned8(offset))
    except struct.error as error:
        raise InvalidSample(f'truncated nav_msgs/Odometry ({len(data)} bytes): '
                            f'{error}') from None
    pose = Pose(Vector3(*values[0:3]), Quaternion(*values[3:7]))
    twist = Twist(Vector3(*values[7:10]), Vector3(*values[10:13]))
    return Odometry(header, child_frame_id, PoseWithCovariance(pose), TwistWithCovariance(twist))
