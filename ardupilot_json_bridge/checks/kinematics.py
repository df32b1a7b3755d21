"""
Rotations and kinematics in numpy stacks: what the checks derive from odometry and IMU.

Matrices are (n, 3, 3) body-to-world; quaternions x-y-z-w (REP-103) unless said otherwise.
"""

import math
from typing import Sequence, Tuple

import numpy as np

from ardupilot_json_bridge.core.frames import quaternion_matrices as w_first_matrices

# Fitted mounting angles this close (deg) to a multiple of 90 are rounded to it.
ROUNDING = 5.0


def quaternion_matrices(q: np.ndarray) -> np.ndarray:
    """Return the rotation matrices (n, 3, 3) of x-y-z-w quaternions (n, 4), normalized."""
    return w_first_matrices(q[:, [3, 0, 1, 2]])


def rotation_vectors(matrices: np.ndarray) -> np.ndarray:
    """Return the axis times angle (rad) of rotation matrices (n, 3, 3), angles below pi."""
    cosine = np.clip((np.trace(matrices, axis1=1, axis2=2) - 1.0) / 2.0, -1.0, 1.0)
    angle = np.arccos(cosine)
    axis = np.stack([matrices[:, 2, 1] - matrices[:, 1, 2], matrices[:, 0, 2] - matrices[:, 2, 0],
                     matrices[:, 1, 0] - matrices[:, 0, 1]], axis=1)
    sine = np.sin(angle)
    scale = np.where(angle < 1e-9, 0.5, angle / (2.0 * np.where(sine == 0, 1.0, sine)))
    return axis * scale[:, None]


def relative_rotations(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return a_k^T b_k for stacks of rotation matrices."""
    return np.einsum('nji,njk->nik', a, b)


def rotations_about(vectors: np.ndarray) -> np.ndarray:
    """Return the rotation matrices of rotation vectors (n, 3) (Rodrigues)."""
    angle = np.linalg.norm(vectors, axis=1)
    k = vectors / np.where(angle == 0, 1.0, angle)[:, None]
    zero = np.zeros(len(k))
    cross = np.stack([np.stack([zero, -k[:, 2], k[:, 1]], axis=1),
                      np.stack([k[:, 2], zero, -k[:, 0]], axis=1),
                      np.stack([-k[:, 1], k[:, 0], zero], axis=1)], axis=1)
    sine, versine = np.sin(angle)[:, None, None], (1 - np.cos(angle))[:, None, None]
    return np.eye(3) + sine * cross + versine * (cross @ cross)


def fitted_rotation(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Return the rotation R minimizing the sum of |R s - t|^2 over rows (Kabsch)."""
    u, _, vt = np.linalg.svd(target.T @ source)
    sign = np.sign(np.linalg.det(u @ vt)) or 1.0
    return u @ np.diag([1.0, 1.0, sign]) @ vt


def matrix_rpy(matrix: np.ndarray) -> Tuple[float, float, float]:
    """Return fixed-axis roll, pitch, yaw (deg) of a rotation matrix (REP-103)."""
    pitch = math.asin(max(-1.0, min(1.0, -matrix[2, 0])))
    roll = math.atan2(matrix[2, 1], matrix[2, 2])
    yaw = math.atan2(matrix[1, 0], matrix[0, 0])
    return tuple(math.degrees(a) for a in (roll, pitch, yaw))


def rounded_angles(rpy: Sequence[float]) -> Tuple[float, ...]:
    """Return angles snapped to multiples of 90 deg where within ROUNDING of one."""
    snapped = []
    for angle in rpy:
        nearest = 90.0 * round(angle / 90.0)
        value = nearest if abs(angle - nearest) < ROUNDING else round(angle, 1)
        snapped.append(0.0 if value == 0 else (180.0 if abs(value) == 180.0 else value))
    return tuple(snapped)


def interpolated(stamps: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    return np.stack([np.interp(at, stamps, values[:, i]) for i in range(values.shape[1])],
                    axis=1)


def interval_means(stamps: np.ndarray, values: np.ndarray, starts: np.ndarray,
                   ends: np.ndarray) -> np.ndarray:
    """
    Return the mean of sampled values (n, k) over each interval [start, end] (trapezoids).

    What a rate integrates to over the interval: a jolt between two attitude samples counts
    as it turned the vehicle, whatever instant the midpoint falls on.
    """
    steps = np.diff(stamps)[:, None]
    integral = np.concatenate([np.zeros((1, values.shape[1])),
                               np.cumsum(0.5 * (values[1:] + values[:-1]) * steps, axis=0)])
    return ((interpolated(stamps, integral, ends) - interpolated(stamps, integral, starts))
            / (ends - starts)[:, None])


def second_difference_means(stamps: np.ndarray, values: np.ndarray,
                            at: np.ndarray) -> np.ndarray:
    """
    Return sampled accelerations (n, k) as a second difference at stamps `at` sees them.

    Motion.acceleration differences positions twice: the true acceleration averaged over
    [at[i - 1], at[i + 1]] with a hat weight peaking at at[i]. The same difference of the
    values' double integral weights them alike, so a vibration quicker than the odometry
    shrinks equally on both sides of the gravity fit. One row per inner stamp of `at`.
    """
    twice = double_integral(stamps, values, at)
    rate = np.diff(twice, axis=0) / np.diff(at)[:, None]
    return np.diff(rate, axis=0) / np.diff((at[1:] + at[:-1]) / 2.0)[:, None]


def double_integral(stamps: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """
    Return the double integral from stamps[0] to each of `at` of values linear between samples.

    Exact for that piecewise linear signal (a cubic within each step), so its second
    differences hold however close the stamps `at` fall, within a step or across one.
    """
    h = np.diff(stamps)[:, None]
    start, end = values[:-1], values[1:]
    slope = (end - start) / h
    zeros = np.zeros((1, values.shape[1]))
    once = np.concatenate([zeros, np.cumsum((start + end) / 2.0 * h, axis=0)])
    twice = np.concatenate([zeros, np.cumsum(once[:-1] * h + start * h ** 2 / 2.0
                                             + slope * h ** 3 / 6.0, axis=0)])
    j = np.clip(np.searchsorted(stamps, at, side='right') - 1, 0, len(stamps) - 2)
    tau = (at - stamps[j])[:, None]
    return twice[j] + once[j] * tau + start[j] * tau ** 2 / 2.0 + slope[j] * tau ** 3 / 6.0


def rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.sum(values * values, axis=1)))) if len(values) else 0.0


class Motion:
    """The odometry's own kinematics: attitude rates, position derivatives, on mid stamps."""

    def __init__(self, odometry: np.ndarray) -> None:
        self.stamps = odometry[:, 0]
        self.position = odometry[:, 1:4]
        self.orientation = odometry[:, 4:8]
        self.twist = odometry[:, 8:11]
        self.rotations = quaternion_matrices(self.orientation)
        dt = np.diff(self.stamps)
        self.mid_stamps = (self.stamps[1:] + self.stamps[:-1]) / 2.0
        self.position_rate = np.diff(self.position, axis=0) / dt[:, None]
        self.mid_twist = (self.twist[1:] + self.twist[:-1]) / 2.0
        half_steps = rotation_vectors(relative_rotations(self.rotations[:-1],
                                                         self.rotations[1:])) / 2.0
        self.mid_rotations = self.rotations[:-1] @ rotations_about(half_steps)
        rate_dt = np.diff(self.mid_stamps)
        self.inner_stamps = self.stamps[1:-1]
        self.acceleration = np.diff(self.position_rate, axis=0) / rate_dt[:, None]
        self.inner_rotations = self.rotations[1:-1]

    def body_rates(self, orientation: np.ndarray) -> np.ndarray:
        """Return the body rates (rad/s) between successive x-y-z-w orientations."""
        rotations = quaternion_matrices(orientation)
        steps = relative_rotations(rotations[:-1], rotations[1:])
        return rotation_vectors(steps) / np.diff(self.stamps)[:, None]

    def roll_pitch_frd(self) -> np.ndarray:
        """Return roll and pitch (rad) at each stamp as ArduPilot's FRD body reads them."""
        r = self.rotations
        roll = np.arctan2(r[:, 2, 1], r[:, 2, 2])
        # FLU's pitch turns the nose down: FRD's is its negative.
        pitch = np.arcsin(np.clip(r[:, 2, 0], -1.0, 1.0))
        return np.stack([roll, pitch], axis=1)
