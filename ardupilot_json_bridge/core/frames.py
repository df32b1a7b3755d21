"""
Frame conventions: ROS (REP-103: ENU world, FLU body, x-y-z-w quaternions) to ArduPilot.

ArduPilot wants NED world, FRD body and scalar-first quaternions that rotate FRD body vectors
into NED. Quaternions in this module are w-first tuples of floats unless a name says otherwise:
they are converted per message, where numpy's per-call overhead costs more than the arithmetic.
"""

import math
from typing import Sequence, Tuple

import numpy as np

from ardupilot_json_bridge.compiled import _frame
from ardupilot_json_bridge.core.protocol import Quaternion

STANDARD_GRAVITY = 9.80665

# (x, y, z)_FLU -> (x, -y, -z)_FRD, as a matrix for composing sensor mountings.
FLU_TO_FRD = np.diag([1.0, -1.0, -1.0])

_HALF_SQRT2 = math.sqrt(0.5)
# 180 deg about (1, 1, 0)/sqrt(2): rotates ENU vectors into NED.
Q_NED_ENU = (0.0, _HALF_SQRT2, _HALF_SQRT2, 0.0)
# 180 deg about x: rotates FRD vectors into FLU.
Q_FLU_FRD = (0.0, 1.0, 0.0, 0.0)


# ENU world vector to NED, (x, y, z) -> (y, x, -z), and FLU body vector to FRD, (x, y, z) ->
# (x, -y, -z): the frame loop's own (compiled/_frame.c), taking any sequence of 3 numbers and
# giving a tuple of floats. Every message and every lock-step frame converts a few vectors.
enu_to_ned = _frame.enu_to_ned
flu_to_frd = _frame.flu_to_frd


def canonical(q: Sequence[float]) -> Quaternion:
    """Return the unit quaternion with w >= 0 (q and -q are the same rotation)."""
    w, x, y, z = (float(v) for v in q)
    unit = _frame.canonical(w, x, y, z)
    if unit is None:
        raise ValueError(f'not a rotation: quaternion {(w, x, y, z)} has norm '
                         f'{math.hypot(w, x, y, z)}')
    return unit


def ros_to_ned_frd(x: float, y: float, z: float, w: float) -> Quaternion:
    """ROS orientation (FLU body in ENU, x-y-z-w) to ArduPilot's (FRD body in NED, w-first)."""
    # Q_NED_ENU * (w, x, y, z) * Q_FLU_FRD multiplied out, made canonical: the frame loop's.
    unit = _frame.ros_to_ned_frd(x, y, z, w)
    if unit is None:
        # Name the orientation as received (the product has the same norm).
        raise ValueError(f'not a rotation: quaternion x, y, z, w {(x, y, z, w)} has norm '
                         f'{math.hypot(x, y, z, w)}')
    return unit


def quaternion_matrices(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (n, 3, 3) of w-first quaternions (n, 4), normalized first."""
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q.T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], axis=1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], axis=1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1),
    ], axis=1)


def quaternion_to_matrix(q: Sequence[float]) -> np.ndarray:
    """Rotation matrix of a w-first unit quaternion."""
    return quaternion_matrices(np.asarray(q, dtype=float).reshape(1, 4))[0]


def rpy_to_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """Rotation of fixed-axis roll, then pitch, then yaw (REP-103 and ArduPilot), radians."""
    cr, sr = math.cos(roll), math.sin(roll)
    cp, sp = math.cos(pitch), math.sin(pitch)
    cy, sy = math.cos(yaw), math.sin(yaw)
    return np.array([
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr],
    ])


def euler_to_quaternion(roll: float, pitch: float, yaw: float) -> Quaternion:
    """w-first quaternion of roll, pitch, yaw in radians (ArduPilot's Euler convention)."""
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    return canonical((cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                      cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy))


def quaternion_to_euler(q: Sequence[float]) -> Tuple[float, float, float]:
    """Roll, pitch, yaw in radians of a w-first quaternion (ArduPilot's Euler convention)."""
    w, x, y, z = q
    roll = math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = math.asin(max(-1.0, min(1.0, 2 * (w * y - z * x))))
    yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return roll, pitch, yaw


def propagate_attitude(q: Sequence[float], gyro: Sequence[float],
                       dt: float) -> Tuple[float, float, float, float]:
    """
    Rotate attitude q by body rates gyro held for dt seconds: q * exp(gyro * dt / 2).

    dt may be negative (carrying an attitude back in time).

    Plain floats: this runs once per SITL frame on 4 numbers, where numpy's per-call overhead
    would cost more than the arithmetic. A rotation too large to represent gives NaN, which
    the encoder refuses.
    """
    wx, wy, wz = gyro
    angle = math.hypot(wx, wy, wz) * abs(dt)
    if not math.isfinite(angle):
        return (math.nan,) * 4
    if angle < 1e-12:
        return tuple(q)
    half = 0.5 * angle
    scale = math.sin(half) / angle * dt
    dw, dx, dy, dz = math.cos(half), wx * scale, wy * scale, wz * scale
    qw, qx, qy, qz = q
    rw = qw * dw - qx * dx - qy * dy - qz * dz
    rx = qw * dx + qx * dw + qy * dz - qz * dy
    ry = qw * dy - qx * dz + qy * dw + qz * dx
    rz = qw * dz + qx * dy - qy * dx + qz * dw
    norm = math.sqrt(rw * rw + rx * rx + ry * ry + rz * rz)
    if rw < 0.0:
        norm = -norm
    return rw / norm, rx / norm, ry / norm, rz / norm
