"""
An independent truth for alignment tests: a vehicle turning on all three axes.

Written with scipy's Rotation and closed-form derivatives, not with the package's frames or
alignment modules. World NED, body FRD, quaternions w-first as ArduPilot wants them.
"""

from dataclasses import dataclass
import math
from typing import Tuple

import numpy as np
from scipy.spatial.transform import Rotation

GRAVITY = 9.80665
# Euler swings (amplitude rad, angular frequency rad/s, phase) for roll, pitch and yaw: peak
# rates of 0.6 to 1.5 rad/s.
SWINGS = ((0.4, 1.5, 0.3), (0.3, 2.0, 1.1), (1.0, 1.5, 0.0))
# Position swings (amplitude m, angular frequency rad/s, phase) north, east, down.
MOTION = ((2.0, 0.9, 0.0), (1.5, 1.1, 0.7), (0.5, 1.3, 0.2))
RATE_STEP = 1e-5


@dataclass(frozen=True)
class Truth:
    """The vehicle's state at one instant."""

    position: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    rotation: Rotation

    @property
    def quaternion(self) -> Tuple[float, float, float, float]:
        x, y, z, w = self.rotation.as_quat()
        return (w, x, y, z) if w >= 0 else (-w, -x, -y, -z)


def rotation(t: float) -> Rotation:
    """Body FRD to NED: intrinsic yaw, pitch, roll (ArduPilot's Euler order)."""
    roll, pitch, yaw = (a * math.sin(w * t + p) for a, w, p in SWINGS)
    return Rotation.from_euler('ZYX', [yaw, pitch, roll])


def truth(t: float) -> Truth:
    pos = np.array([a * math.sin(w * t + p) for a, w, p in MOTION])
    vel = np.array([a * w * math.cos(w * t + p) for a, w, p in MOTION])
    acc = np.array([-a * w * w * math.sin(w * t + p) for a, w, p in MOTION])
    return Truth(pos, vel, acc, rotation(t))


def body_rates(t: float) -> np.ndarray:
    """FRD angular velocity: the body-frame rotation vector over a short central step."""
    step = rotation(t - RATE_STEP).inv() * rotation(t + RATE_STEP)
    return step.as_rotvec() / (2 * RATE_STEP)


def specific_force(t: float) -> np.ndarray:
    """Return what an ideal accelerometer reads in FRD: acceleration less gravity, in the body."""
    state = truth(t)
    return state.rotation.inv().apply(state.acceleration - np.array([0.0, 0.0, GRAVITY]))


def attitude_error_deg(q: Tuple[float, ...], t: float) -> float:
    """Angle between a w-first quaternion and the truth at t, degrees."""
    w, x, y, z = q
    error = Rotation.from_quat([x, y, z, w]).inv() * rotation(t)
    return math.degrees(np.linalg.norm(error.as_rotvec()))
