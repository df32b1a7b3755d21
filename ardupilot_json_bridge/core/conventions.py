"""
Judge a simulator's conventions from its own IMU and odometry, before SITL fails quietly.

Odometry and IMU together over-determine the frames. The gyro must equal the body rates of
successive odometry attitudes (after the IMU's mounting); the accelerometer, turned into the
world by the attitude, must equal the odometry's acceleration plus g up; the twist must equal
the position's derivative in the child frame. Each convention error breaks one of these in a
way that names it, and the fix is computed: a least-squares mounting rotation, the gravity and
acceleration gains of a linear fit, the frame the twist matches.

Works on raw ROS values (REP-103 expected: ENU world, FLU body, x-y-z-w), with no ROS import.
Off the per-frame path: a checker holds a window of samples and judges on demand.
"""

from collections import deque
from dataclasses import dataclass
import logging
import math
import threading
from typing import Any, Deque, List, Optional, Sequence, Tuple

import numpy as np

GRAVITY = 9.80665
OK, WRONG, UNDECIDED = 'ok', 'wrong', 'undecided'
# Motion needed to decide: rotation (rad/s), horizontal or vertical acceleration (m/s^2) and
# speed (m/s), as RMS over the window.
MIN_ROTATION = 0.2
MIN_ACCELERATION = 0.5
MIN_SPEED = 0.3
# Fitted mounting angles this close (deg) to a multiple of 90 are rounded to it.
ROUNDING = 5.0
DEG_PER_RAD = math.degrees(1.0)
# Seconds of samples a bag check judges (its last ones).
CHECK_WINDOW = 60.0
# Live checks: a rolling window (s), judged every period (s).
LIVE_WINDOW = 10.0
LIVE_PERIOD = 5.0


@dataclass(frozen=True)
class Check:
    """One verdict: what was checked, the figures measured, and the fix when it is wrong."""

    name: str
    verdict: str
    measured: str
    fix: str = ''


def quaternion_matrices(q: np.ndarray) -> np.ndarray:
    """Return the rotation matrices (n, 3, 3) of x-y-z-w quaternions (n, 4), normalized."""
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    x, y, z, w = q.T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], axis=1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], axis=1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1),
    ], axis=1)


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


def rpy_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """Return the rotation of fixed-axis roll, pitch, yaw in degrees."""
    r, p, y = (math.radians(a) for a in (roll, pitch, yaw))
    cr, sr, cp, sp, cy, sy = (math.cos(r), math.sin(r), math.cos(p), math.sin(p),
                              math.cos(y), math.sin(y))
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def rounded_angles(rpy: Sequence[float]) -> Tuple[float, ...]:
    """Return angles snapped to multiples of 90 deg where within ROUNDING of one."""
    snapped = []
    for angle in rpy:
        nearest = 90.0 * round(angle / 90.0)
        value = nearest if abs(angle - nearest) < ROUNDING else round(angle, 1)
        snapped.append(0.0 if value == 0 else (180.0 if abs(value) == 180.0 else value))
    return tuple(snapped)


def _interpolated(stamps: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    return np.stack([np.interp(at, stamps, values[:, i]) for i in range(values.shape[1])],
                    axis=1)


def _rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.sum(values * values, axis=1)))) if len(values) else 0.0


class ConventionChecker:
    """Holds a window of raw IMU and odometry samples and judges their conventions."""

    def __init__(self, imu_mounting_rpy: Sequence[float] = (0.0, 0.0, 0.0),
                 odom_twist_frame: str = 'child', window: float = 20.0) -> None:
        self.mounting_rpy = tuple(float(a) for a in imu_mounting_rpy)
        self.twist_frame = odom_twist_frame
        self.window = window
        self._w_first = False
        self._fitted_mounting: Optional[np.ndarray] = None
        # Appended by a source's thread while another judges: the lock guards both deques.
        self._lock = threading.Lock()
        self._imu: Deque[Tuple[float, ...]] = deque()
        self._odometry: Deque[Tuple[float, ...]] = deque()

    def add_imu(self, stamp: float, gyro: Sequence[float], accel: Sequence[float]) -> None:
        """Add one sensor_msgs/Imu: angular_velocity and linear_acceleration as published."""
        with self._lock:
            self._imu.append((stamp, *gyro, *accel))
            self._trim(self._imu)

    def add_odometry(self, stamp: float, position: Sequence[float],
                     orientation_xyzw: Sequence[float], linear: Sequence[float]) -> None:
        """Add one nav_msgs/Odometry: pose position and orientation, twist linear."""
        with self._lock:
            self._odometry.append((stamp, *position, *orientation_xyzw, *linear))
            self._trim(self._odometry)

    def _trim(self, samples: Deque[Tuple[float, ...]]) -> None:
        while samples and abs(samples[-1][0] - samples[0][0]) > self.window:
            samples.popleft()

    def checks(self) -> List[Check]:
        """Return every verdict on the samples held now."""
        with self._lock:
            imu = np.array(self._imu, dtype=float)
            odometry = np.array(self._odometry, dtype=float)
        if len(imu) < 20 or len(odometry) < 20:
            return [Check('samples', UNDECIDED, f'{len(imu)} IMU and {len(odometry)} '
                                                'odometry samples',
                          'record a few seconds of both')]
        results = [self._stamps('imu', imu[:, 0]), self._stamps('odometry', odometry[:, 0])]
        norms = np.linalg.norm(odometry[:, 4:8], axis=1)
        results.append(self._unit_quaternion(norms))
        if not np.all(norms > 1e-6):
            return results
        ordered = np.argsort(odometry[:, 0], kind='stable')
        odometry = odometry[ordered][np.diff(odometry[ordered, 0], prepend=-np.inf) > 0]
        imu = imu[np.argsort(imu[:, 0], kind='stable')]
        motion = Motion(odometry)
        results += self._rotation_checks(imu, motion)
        if self._w_first:
            # Judge the rest as if the order were fixed, so only the cause is named.
            odometry[:, 4:8] = odometry[:, [5, 6, 7, 4]]
            motion = Motion(odometry)
        results.append(self._gravity(imu, motion))
        results.append(self._twist(motion))
        return results

    @staticmethod
    def _stamps(name: str, stamps: np.ndarray) -> Check:
        steps = np.diff(stamps)
        back, repeated = int(np.sum(steps < 0)), int(np.sum(steps == 0))
        span = stamps[-1] - stamps[0]
        rate = (len(stamps) - 1) / span if span > 0 else 0.0
        measured = f'{rate:.0f} Hz, {back} step(s) back, {repeated} repeated'
        if back or repeated or span <= 0:
            return Check(f'time: {name} stamps', WRONG, measured,
                         'stamp each message with the physics time it describes, advancing')
        return Check(f'time: {name} stamps', OK, measured)

    @staticmethod
    def _unit_quaternion(norms: np.ndarray) -> Check:
        worst = float(np.max(np.abs(norms - 1.0)))
        measured = f'norm {float(np.min(norms)):.4f} to {float(np.max(norms)):.4f}'
        if worst > 1e-3:
            return Check('quaternion: unit', WRONG, measured,
                         'publish unit quaternions (normalize x, y, z, w)')
        return Check('quaternion: unit', OK, measured)

    def _rotation_checks(self, imu: np.ndarray, motion: 'Motion') -> List[Check]:
        """Gyro units, quaternion component order and IMU mounting, from the body rates."""
        self._w_first, self._fitted_mounting = False, None
        rates = motion.body_rates(motion.orientation)
        gyro = _interpolated(imu[:, 0], imu[:, 1:4], motion.mid_stamps)
        rotation = _rms(rates)
        names = ('units: gyro', 'quaternion: order and motion', 'imu mounting')
        if rotation < MIN_ROTATION:
            if _rms(gyro) > 5 * MIN_ROTATION:
                return [Check(names[0], UNDECIDED, f'gyro RMS {_rms(gyro):.2f}, odometry '
                                                   f'attitude rates RMS {rotation:.3f}'),
                        Check(names[1], WRONG, f'orientation turns {rotation:.3f} rad/s RMS '
                                               f'while the gyro reads {_rms(gyro):.2f}',
                              "publish the vehicle's orientation in odometry (it does not "
                              'change)'),
                        Check(names[2], UNDECIDED, 'needs rotation')]
            return [Check(name, UNDECIDED, f'rotation {rotation:.3f} rad/s RMS: turn the '
                                           'vehicle on all axes to decide') for name in names]
        checks = []
        scale = _rms(gyro) / rotation
        if abs(scale - DEG_PER_RAD) / DEG_PER_RAD < 0.1:
            checks.append(Check(names[0], WRONG, f'gyro / attitude rates = {scale:.1f}',
                                'publish angular_velocity in rad/s (it reads deg/s)'))
            gyro = gyro / DEG_PER_RAD
        else:
            checks.append(Check(names[0], OK, f'gyro / attitude rates = {scale:.3f}'))
        residual, mounting = self._mounting_fit(gyro, rates)
        swapped = motion.body_rates(motion.orientation[:, [1, 2, 3, 0]])
        swapped_residual, _ = self._mounting_fit(gyro, swapped)
        relative = residual / rotation
        if relative > 0.3 and swapped_residual < 0.3 * residual:
            checks.append(Check(names[1], WRONG, f'gyro fits the attitude rates to '
                                                 f'{relative:.0%}, and to '
                                                 f'{swapped_residual / rotation:.0%} read '
                                                 'as w-first',
                                'publish orientation as x, y, z, w (it is w, x, y, z)'))
            residual, mounting = self._mounting_fit(gyro, swapped)
            relative = residual / rotation
            self._w_first = True
        else:
            checks.append(Check(names[1], OK, f'gyro fits the attitude rates to '
                                              f'{relative:.1%}'))
        angles = rounded_angles(matrix_rpy(mounting))
        measured = f'sensor at rpy {list(angles)} deg in the body, fit to {relative:.1%}'
        if relative > 0.3:
            checks.append(Check(names[2], UNDECIDED, measured + ': no fixed rotation fits'))
        elif np.degrees(np.linalg.norm(rotation_vectors(
                (rpy_matrix(*angles).T @ rpy_matrix(*self.mounting_rpy))[None]))) > ROUNDING:
            checks.append(Check(names[2], WRONG, measured,
                                f'imu_mounting_rpy: {list(angles)}'))
        else:
            checks.append(Check(names[2], OK, measured))
        if relative <= 0.3:
            self._fitted_mounting = rpy_matrix(*angles)
        return checks

    @staticmethod
    def _mounting_fit(gyro: np.ndarray, rates: np.ndarray) -> Tuple[float, np.ndarray]:
        """Return the RMS residual and the rotation taking gyro (sensor) to body rates."""
        mounting = fitted_rotation(gyro, rates)
        return _rms(gyro @ mounting.T - rates), mounting

    def _gravity(self, imu: np.ndarray, motion: 'Motion') -> Check:
        """Fit R f = alpha a + gamma up: units, sign, gravity and the world's vertical."""
        mounting = self._fitted_mounting
        if mounting is None:
            mounting = rpy_matrix(*self.mounting_rpy)
        accel = _interpolated(imu[:, 0], imu[:, 4:7], motion.inner_stamps) @ mounting.T
        world = np.einsum('nij,nj->ni', motion.inner_rotations, accel)
        acceleration = motion.acceleration
        up = np.tile([0.0, 0.0, 1.0], (len(world), 1))
        moving = _rms(acceleration) > MIN_ACCELERATION
        if moving:
            design = np.stack([acceleration.reshape(-1), up.reshape(-1)], axis=1)
            (alpha, gamma), *_ = np.linalg.lstsq(design, world.reshape(-1), rcond=None)
        else:
            alpha, gamma = math.nan, float(np.mean(world[:, 2]))
        measured = (f'specific force in the world = {alpha:.2f} x acceleration + '
                    f'{gamma:.2f} up' if moving else
                    f'at rest: specific force {gamma:.2f} m/s^2 up')
        # What the fit leaves sideways: an IMU tilted against the attitude.
        explained = (alpha * acceleration if moving else 0.0) + gamma * up
        horizontal = float(np.max(np.abs(np.mean((world - explained)[:, :2], axis=0))))
        return Check('gravity', *gravity_verdict(alpha, gamma, horizontal, measured))

    def _twist(self, motion: 'Motion') -> Check:
        velocity = motion.position_rate
        if _rms(velocity) < MIN_SPEED:
            return Check('twist frame', UNDECIDED, f'speed {_rms(velocity):.2f} m/s RMS: move '
                                                   'the vehicle to decide')
        twist = motion.mid_twist
        in_child = np.einsum('nji,nj->ni', motion.mid_rotations, velocity)
        child_error, world_error = _rms(twist - in_child), _rms(twist - velocity)
        measured = (f'twist differs from the position rate by {child_error:.2f} m/s RMS read '
                    f'in the child frame, {world_error:.2f} in the world')
        found = 'child' if child_error < world_error else 'world'
        if min(child_error, world_error) > 0.3 * _rms(velocity):
            return Check('twist frame', UNDECIDED, measured + ': neither fits')
        if abs(child_error - world_error) < 0.2 * _rms(velocity):
            return Check('twist frame', UNDECIDED, measured + ': too little rotation to tell')
        if found != self.twist_frame:
            return Check('twist frame', WRONG, measured, f'odom_twist_frame: {found}')
        return Check('twist frame', OK, measured)


def observe_imu(checker: ConventionChecker, msg: Any, stamp: float) -> None:
    """Add a sensor_msgs/Imu (any object with its field names) to a checker."""
    v, a = msg.angular_velocity, msg.linear_acceleration
    checker.add_imu(stamp, (v.x, v.y, v.z), (a.x, a.y, a.z))


def observe_odometry(checker: ConventionChecker, msg: Any, stamp: float) -> None:
    """Add a nav_msgs/Odometry (any object with its field names) to a checker."""
    pose, linear = msg.pose.pose, msg.twist.twist.linear
    p, o = pose.position, pose.orientation
    checker.add_odometry(stamp, (p.x, p.y, p.z), (o.x, o.y, o.z, o.w),
                         (linear.x, linear.y, linear.z))


def gravity_verdict(alpha: float, gamma: float, horizontal: float,
                    measured: str) -> Tuple[str, str, str]:
    """Return (verdict, measured, fix) of the fit R f = alpha a + gamma up."""
    if abs(gamma - GRAVITY) < 0.1 * GRAVITY and (math.isnan(alpha) or abs(alpha - 1) < 0.2):
        if horizontal > 0.1 * GRAVITY:
            return WRONG, measured + f', {horizontal:.2f} sideways', (
                'the IMU is tilted against the odometry attitude: check imu_mounting_rpy')
        return OK, measured, ''
    if abs(gamma - 1.0) < 0.1 and (math.isnan(alpha) or abs(alpha * GRAVITY - 1) < 0.2):
        return WRONG, measured, 'publish linear_acceleration in m/s^2 (it reads g)'
    if abs(gamma) < 0.1 * GRAVITY:
        return WRONG, measured, ('publish specific force (acceleration minus gravity, 9.81 '
                                 'up at rest); it reads coordinate acceleration, no gravity')
    if abs(gamma + GRAVITY) < 0.1 * GRAVITY:
        if math.isnan(alpha):
            return WRONG, measured, (
                'gravity reads down: the IMU reports gravity instead of specific force, or is '
                'mounted upside down (imu_mounting_rpy: [180.0, 0.0, 0.0] for an FRD IMU), or '
                'the world is NED: turn the vehicle to tell which')
        if abs(alpha + 1) < 0.2:
            return WRONG, measured, ('negate linear_acceleration: it reads gravity plus '
                                     'acceleration, not specific force')
        if abs(alpha - 1) < 0.2:
            return WRONG, measured, ('publish an ENU world (REP-103), z up: gravity points '
                                     'along +z (NED?)')
    return WRONG, measured, 'the IMU and the odometry disagree: see the checks above'


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


class LiveConventions:
    """
    Judges a checker every period seconds in a thread of its own, off the per-frame path.

    Logs one WARN line with the fix when a check turns wrong (not again while it stays wrong);
    `latest` holds the newest verdicts for diagnostics.
    """

    def __init__(self, checker: ConventionChecker, logger: logging.Logger,
                 period: float = LIVE_PERIOD) -> None:
        self.checker = checker
        self.logger = logger
        self.period = period
        self.latest: List[Check] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='conventions', daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def judge(self) -> List[Check]:
        """Judge now; warn of each check that turned wrong since the last judgement."""
        before = {c.name for c in self.latest if c.verdict == WRONG}
        checks = self.checker.checks()
        for check in checks:
            if check.verdict == WRONG and check.name not in before:
                self.logger.warning(f'conventions: {check.name} is wrong ({check.measured}); '
                                    f'fix: {check.fix}')
        self.latest = checks
        return checks

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.judge()
            except (ValueError, FloatingPointError, np.linalg.LinAlgError) as error:
                self.logger.debug(f'conventions: no judgement this time: {error!r}')


def format_table(checks: Sequence[Check]) -> str:
    """Return the checks as an aligned text table: check, verdict, measured, fix."""
    rows = [('check', 'verdict', 'measured', 'fix')] + [
        (c.name, c.verdict, c.measured, c.fix or '-') for c in checks]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return '\n'.join(f'{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}'
                     for r in rows)
