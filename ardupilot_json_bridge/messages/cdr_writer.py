"""
The messages a flight recording holds, serialized with struct (little-endian CDR).

A MuJoCo flight records five messages a frame at 1200 frames/s; building and serializing
them as rosbags objects costs more than stepping the physics. Layouts as in cdr.py: a header
whose frame_id string shifts what follows, float64 fields at 8-byte alignment (offsets count
from after the 4-byte encapsulation header). Covariances are written as zeros: unknown.
"""

import struct
from typing import Sequence

from ardupilot_json_bridge.messages.inputs import time_parts

CLOCK_TYPE = 'rosgraph_msgs/msg/Clock'
FLOAT64_ARRAY_TYPE = 'std_msgs/msg/Float64MultiArray'
ENCAPSULATION = b'\x00\x01\x00\x00'
ZEROS_3X3 = bytes(9 * 8)
ZEROS_6X6 = bytes(36 * 8)
Vector = Sequence[float]


def _string(text: str) -> bytes:
    data = text.encode() + b'\x00'
    return struct.pack('<I', len(data)) + data


def pad(body: bytes, alignment: int) -> bytes:
    return body + bytes(-len(body) % alignment)


def _stamp(t: float) -> bytes:
    return struct.pack('<iI', *time_parts(t))


def header_bytes(t: float, frame_id: str) -> bytes:
    return _stamp(t) + _string(frame_id)


def encode_clock(t: float) -> bytes:
    """rosgraph_msgs/Clock of t seconds."""
    return ENCAPSULATION + _stamp(t)


def encode_imu(t: float, frame_id: str, orientation: Vector, body_rates: Vector,
               specific_force: Vector) -> bytes:
    """sensor_msgs/Imu: orientation x, y, z, w; angular velocity; linear acceleration."""
    return (ENCAPSULATION + pad(header_bytes(t, frame_id), 8)
            + struct.pack('<4d', *orientation) + ZEROS_3X3
            + struct.pack('<3d', *body_rates) + ZEROS_3X3
            + struct.pack('<3d', *specific_force) + ZEROS_3X3)


def encode_odometry(t: float, frame_id: str, child_frame_id: str, position: Vector,
                    orientation: Vector, linear: Vector, angular: Vector) -> bytes:
    """nav_msgs/Odometry: pose (position, orientation x, y, z, w) and twist."""
    head = pad(pad(header_bytes(t, frame_id), 4) + _string(child_frame_id), 8)
    return (ENCAPSULATION + head + struct.pack('<7d', *position, *orientation) + ZEROS_6X6
            + struct.pack('<6d', *linear, *angular) + ZEROS_6X6)


# MultiArrayLayout with no dimensions: an empty dim sequence and data_offset 0.
EMPTY_LAYOUT = struct.pack('<II', 0, 0)


def encode_float64_array(values: Sequence[float]) -> bytes:
    """std_msgs/Float64MultiArray of values, with an empty layout."""
    body = EMPTY_LAYOUT + struct.pack('<I', len(values))
    if values:
        body = pad(body, 8) + struct.pack(f'<{len(values)}d', *values)
    return ENCAPSULATION + body
