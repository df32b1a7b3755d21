"""
Raw IMU and odometry as a ROS simulator publishes them, with convention faults to inject.

Independent of the package: the motion is closed-form, rotations are scipy's. REP-103: ENU
world, FLU body, x-y-z-w quaternions, specific force in the IMU, twist in the child frame.
The vehicle turns on all three axes and accelerates on all three.
"""

from dataclasses import dataclass
import math
from typing import Iterator, Sequence, Tuple

import numpy as np
from scipy.spatial.transform import Rotation

GRAVITY = 9.80665
FAULTS = ('frd_imu', 'gyro_deg', 'accel_g', 'no_gravity', 'gravity_reversed', 'world_twist',
          'w_first', 'non_unit', 'ned_world', 'odom_late', 'planar_odometry')
# How late 'odom_late' stamps odometry (s), as a simulator stamping on publish might.
ODOM_DELAY = 0.05
# A vibration's frequency (Hz): motors shaking the frame in roll.
VIBRATION_HZ = 25.0
RATE_STEP = 1e-5
# Swings: (amplitude, angular frequency rad/s, phase) per axis.
# A crash landing: the vertical speed (m/s) stopped and the roll (rad) jolted within a time
# constant (s); the runs of frames a loaded machine skips last up to SKIPPED_RUN (s).
IMPACT_SPEED = 2.0
IMPACT_ROLL = 0.2
IMPACT_TIME = 0.003
SKIPPED_RUN = 0.1
ANGLE_SWINGS = ((0.35, 1.3, 0.2), (0.3, 1.7, 1.0), (1.2, 0.9, 0.0))
POSITION_SWINGS = ((3.0, 0.8, 0.0), (2.0, 1.0, 0.6), (1.0, 1.2, 0.3))


@dataclass(frozen=True)
class Stream:
    """One simulator: rates (Hz), noise, faults, and whether the vehicle moves."""

    imu_rate: float = 1000.0
    odom_rate: float = 250.0
    seconds: float = 8.0
    gyro_noise: float = 0.005
    accel_noise: float = 0.05
    faults: Tuple[str, ...] = ()
    moving: bool = True
    phase: float = 0.0
    seed: int = 1
    vibration: float = 0.0
    # A loaded machine: runs of frames skipped (the fraction lost), steps that vary (a
    # fraction of the step, uniform), and a crash landing at this time (s), 0 for none.
    skipped: float = 0.0
    irregular: float = 0.0
    impact: float = 0.0


def _sigmoid(x: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * x))


def _softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def _rotation(stream: Stream, t: float) -> Rotation:
    """Body FLU to world ENU."""
    if not stream.moving:
        return Rotation.from_euler('xyz', [0.02, -0.03, 0.7])
    angles = [a * math.sin(w * t + p + stream.phase) for a, w, p in ANGLE_SWINGS]
    angles[0] += stream.vibration * math.sin(2 * math.pi * VIBRATION_HZ * t)
    if stream.impact:
        angles[0] += IMPACT_ROLL * _sigmoid((t - stream.impact) / IMPACT_TIME)
    return Rotation.from_euler('ZYX', angles[::-1])


def _impact(stream: Stream, t: float, order: int) -> np.ndarray:
    """Return the landing's share of position, velocity or acceleration (IMPACT_SPEED up)."""
    if not stream.impact:
        return np.zeros(3)
    x = (t - stream.impact) / IMPACT_TIME
    sigma = _sigmoid(x)
    share = [IMPACT_TIME * _softplus(x), sigma, sigma * (1.0 - sigma) / IMPACT_TIME][order]
    return np.array([0.0, 0.0, IMPACT_SPEED * share])


def sample_times(stream: Stream, rate: float, seed: int) -> np.ndarray:
    """Return the instants sampled at rate: steps that vary, runs of frames skipped."""
    rng = np.random.default_rng(seed)
    count = int(stream.seconds * rate)
    if stream.irregular:
        steps = (1.0 + stream.irregular * rng.uniform(-1.0, 1.0, count)) / rate
        times = np.concatenate([[0.0], np.cumsum(steps[:-1])])
        times = times[times < stream.seconds]
    else:
        times = np.arange(count) / rate
    if stream.skipped:
        keep = np.ones(len(times), dtype=bool)
        k = 0
        while k < len(times):
            run = int(rng.integers(2, max(3, int(SKIPPED_RUN * rate))))
            if rng.uniform() < stream.skipped:
                keep[k:k + run] = False
            k += run
        keep[0] = True
        times = times[keep]
    return times


def _position(stream: Stream, t: float, order: int) -> np.ndarray:
    if not stream.moving:
        return np.array([1.0, 2.0, 0.5]) if order == 0 else np.zeros(3)
    values = []
    for a, w, p in POSITION_SWINGS:
        phase = w * t + p + stream.phase
        values.append([a * math.sin(phase), a * w * math.cos(phase),
                       -a * w * w * math.sin(phase)][order])
    return np.array(values) + _impact(stream, t, order)


def _body_rates(stream: Stream, t: float) -> np.ndarray:
    step = _rotation(stream, t - RATE_STEP).inv() * _rotation(stream, t + RATE_STEP)
    return step.as_rotvec() / (2 * RATE_STEP)


def imu_samples(stream: Stream) -> Iterator[Tuple[float, Sequence[float], Sequence[float]]]:
    """Yield (stamp, angular_velocity, linear_acceleration) as published."""
    noise = np.random.default_rng(stream.seed)
    faults = stream.faults
    for t in sample_times(stream, stream.imu_rate, stream.seed + 1):
        t = float(t)
        rotation = _rotation(stream, t)
        acceleration = _position(stream, t, 2)
        gyro = _body_rates(stream, t)
        if 'no_gravity' in faults:
            accel = rotation.inv().apply(acceleration)
        else:
            accel = rotation.inv().apply(acceleration + np.array([0.0, 0.0, GRAVITY]))
        if 'ned_world' in faults:
            # The same physics in NED and FRD: FRD body vectors are FLU's with y, z negated.
            accel = accel * [1, -1, -1]
            gyro = gyro * [1, -1, -1]
        gyro = gyro + noise.normal(0.0, stream.gyro_noise, 3)
        accel = accel + noise.normal(0.0, stream.accel_noise, 3)
        if 'frd_imu' in faults:
            gyro, accel = gyro * [1, -1, -1], accel * [1, -1, -1]
        if 'gyro_deg' in faults:
            gyro = np.degrees(gyro)
        if 'accel_g' in faults:
            accel = accel / GRAVITY
        if 'gravity_reversed' in faults:
            accel = -accel
        yield t, tuple(gyro), tuple(accel)


NED_FROM_ENU = Rotation.from_matrix([[0, 1, 0], [1, 0, 0], [0, 0, -1]])
FLU_FROM_FRD = Rotation.from_euler('x', math.pi)


OdometryRow = Tuple[float, Sequence[float], Sequence[float], Sequence[float]]


def odometry_samples(stream: Stream) -> Iterator[OdometryRow]:
    """Yield (stamp, position, orientation as published, twist linear)."""
    faults = stream.faults
    for t in sample_times(stream, stream.odom_rate, stream.seed + 2):
        t = float(t)
        rotation = _rotation(stream, t)
        position, velocity = _position(stream, t, 0), _position(stream, t, 1)
        if 'ned_world' in faults:
            rotation = NED_FROM_ENU * rotation * FLU_FROM_FRD
            position, velocity = NED_FROM_ENU.apply(position), NED_FROM_ENU.apply(velocity)
        twist = velocity if 'world_twist' in faults else rotation.inv().apply(velocity)
        x, y, z, w = rotation.as_quat()
        orientation = (w, x, y, z) if 'w_first' in faults else (x, y, z, w)
        if 'non_unit' in faults:
            orientation = tuple(1.1 * v for v in orientation)
        if 'planar_odometry' in faults:
            # Gazebo's OdometryPublisher at <dimensions>2: no z, the twist turned by yaw only.
            yaw = rotation.as_euler('ZYX')[0]
            twist = Rotation.from_euler('z', yaw).inv().apply(velocity * [1, 1, 0])
            position = position * [1, 1, 0]
        stamp = t + ODOM_DELAY if 'odom_late' in faults else t
        yield stamp, tuple(position), orientation, tuple(twist)
