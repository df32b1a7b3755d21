"""
Sensor values at any instant, from short histories of stamped samples.

Between two samples of an input, values are interpolated: position, velocity, rates and
specific force linearly, attitude by slerp. Past the odometry's ends (before its first sample
or after its newest), and between odometry samples too far apart for slerp to be exact, the
nearest odometry is carried to the instant with the IMU: attitude by
the gyro, velocity by the specific force plus gravity, position by the velocity; dt may have
either sign. Carrying costs one step per CARRY_STEP of gap, so callers check History.gap
against their limit first. Engines without an IMU get one derived from their odometry. Plain
floats throughout: this runs once per SITL frame on a handful of numbers, where numpy's
per-call overhead would cost more than the arithmetic.
"""

import bisect
import math
from typing import Generic, List, Optional, Sequence, Tuple, TypeVar

from ardupilot_json_bridge.core.frames import propagate_attitude, STANDARD_GRAVITY
from ardupilot_json_bridge.core.samples import ImuSample, OdometrySample, Vector3

S = TypeVar('S')
Quaternion = Tuple[float, float, float, float]

# Longest step of one midpoint integration when odometry is carried by the IMU.
CARRY_STEP = 0.005
# Odometry samples further apart than this are not interpolated (slerp's chord error grows
# with the square of the gap): the nearer one is carried by the IMU instead.
INTERPOLATION_SPAN = 0.0125
# A stamp this far behind an input's newest is a restarted simulation, not a late message.
RESET_JUMP = 1.0
# This many late stamps in a row, each newer than the one before, are a clock that went back
# by less than RESET_JUMP (a restart), not messages delivered out of order.
LATE_RUN_RESET = 5
# Odometry-only mode differentiates velocity over at least this long, so stamp jitter does
# not become acceleration spikes.
MIN_DIFFERENCE_SPAN = 0.004


class Appended:
    """What History.append did with a sample (values are short names for logs and counts)."""

    ADDED = 'added'
    REPEATED = 'repeated'
    LATE = 'late'
    RESET = 'reset'


class History(Generic[S]):
    """Samples of one input in stamp order, keeping the last `keep` seconds of them."""

    __slots__ = ('stamps', 'samples', 'keep', '_late_run', '_late_stamp')

    def __init__(self, keep: float) -> None:
        self.stamps: List[float] = []
        self.samples: List[S] = []
        self.keep = keep
        self._late_run = 0
        self._late_stamp = -math.inf

    def __len__(self) -> int:
        return len(self.stamps)

    def clear(self) -> None:
        self.stamps.clear()
        self.samples.clear()

    def append(self, stamp: float, sample: S) -> str:
        """
        Add a sample newer than the newest; refuse repeated and late stamps.

        A stamp more than RESET_JUMP behind the newest starts the history again (a simulation
        reset or a looping recording), and so does the last of LATE_RUN_RESET late stamps in a
        row that go forward among themselves (a smaller jump back).
        """
        stamps = self.stamps
        result = Appended.ADDED
        if stamps:
            newest = stamps[-1]
            if stamp == newest:
                return Appended.REPEATED
            if stamp < newest:
                if newest - stamp <= RESET_JUMP and not self._late_run_ends(stamp):
                    return Appended.LATE
                self.clear()
                result = Appended.RESET
        self._late_run = 0
        self._late_stamp = -math.inf
        stamps.append(stamp)
        self.samples.append(sample)
        if stamp - stamps[0] > 2.0 * self.keep:
            cut = bisect.bisect_left(stamps, stamp - self.keep)
            del stamps[:cut]
            del self.samples[:cut]
        return result

    def _late_run_ends(self, stamp: float) -> bool:
        """Count a late stamp into the run of late ones; True once the run is a reset."""
        self._late_run = self._late_run + 1 if stamp > self._late_stamp else 1
        self._late_stamp = stamp
        return self._late_run >= LATE_RUN_RESET

    @property
    def newest(self) -> Optional[S]:
        return self.samples[-1] if self.samples else None

    @property
    def newest_stamp(self) -> Optional[float]:
        return self.stamps[-1] if self.stamps else None

    def around(self, stamp: float) -> Tuple[Optional[S], Optional[S]]:
        """Return the newest sample at or before stamp and the oldest after it (or None)."""
        index = bisect.bisect_right(self.stamps, stamp)
        samples = self.samples
        return (samples[index - 1] if index else None,
                samples[index] if index < len(samples) else None)

    def gap(self, stamp: float) -> float:
        """Physics time from stamp to the nearest sample, either side; infinite when empty."""
        stamps = self.stamps
        index = bisect.bisect_right(stamps, stamp)
        before = stamp - stamps[index - 1] if index else math.inf
        after = stamps[index] - stamp if index < len(stamps) else math.inf
        return min(before, after)


def lerp3(a: Sequence[float], b: Sequence[float], f: float) -> Vector3:
    """Return a + f (b - a) for 3-vectors."""
    return (a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2]))


def slerp(a: Sequence[float], b: Sequence[float], f: float) -> Quaternion:
    """Spherical interpolation of w-first unit quaternions, the short way round."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    dot = aw * bw + ax * bx + ay * by + az * bz
    if dot < 0.0:
        bw, bx, by, bz, dot = -bw, -bx, -by, -bz, -dot
    if dot > 0.9999995:
        wa, wb = 1.0 - f, f
    else:
        theta = math.acos(min(1.0, dot))
        sin_theta = math.sin(theta)
        wa, wb = math.sin((1.0 - f) * theta) / sin_theta, math.sin(f * theta) / sin_theta
    w, x, y, z = (wa * aw + wb * bw, wa * ax + wb * bx, wa * ay + wb * by, wa * az + wb * bz)
    norm = math.sqrt(w * w + x * x + y * y + z * z)
    if w < 0.0:
        norm = -norm
    return w / norm, x / norm, y / norm, z / norm


def rotate(q: Sequence[float], v: Sequence[float]) -> Vector3:
    """Return v rotated by the w-first unit quaternion q (body to world)."""
    w, x, y, z = q
    vx, vy, vz = v
    # t = 2 (q_vec x v); v' = v + w t + q_vec x t
    tx, ty, tz = 2.0 * (y * vz - z * vy), 2.0 * (z * vx - x * vz), 2.0 * (x * vy - y * vx)
    return (vx + w * tx + y * tz - z * ty, vy + w * ty + z * tx - x * tz,
            vz + w * tz + x * ty - y * tx)


def imu_at(history: 'History[ImuSample]', stamp: float) -> Tuple[Vector3, Vector3]:
    """Gyro and specific force at stamp: linear between samples, the nearest past the ends."""
    before, after = history.around(stamp)
    if before is None:
        return after.gyro, after.accel
    if after is None or before.stamp == stamp:
        return before.gyro, before.accel
    f = (stamp - before.stamp) / (after.stamp - before.stamp)
    return lerp3(before.gyro, after.gyro, f), lerp3(before.accel, after.accel, f)


def carry(odometry: OdometrySample, imu: 'History[ImuSample]',
          stamp: float) -> Tuple[Vector3, Vector3, Quaternion]:
    """
    Position, velocity and attitude of odometry moved to stamp (either side) by the IMU.

    Midpoint steps of at most CARRY_STEP; without IMU samples, the odometry's own body rates
    turn the attitude and the velocity holds.
    """
    dt = stamp - odometry.stamp
    steps = max(1, math.ceil(abs(dt) / CARRY_STEP))
    h = dt / steps
    (px, py, pz), (vx, vy, vz) = odometry.position, odometry.velocity
    q = odometry.quaternion
    for step in range(steps):
        if len(imu):
            gyro, accel = imu_at(imu, odometry.stamp + (step + 0.5) * h)
            ax, ay, az = rotate(propagate_attitude(q, gyro, 0.5 * h), accel)
            az += STANDARD_GRAVITY
        else:
            gyro, ax, ay, az = odometry.gyro, 0.0, 0.0, 0.0
        px += h * (vx + 0.5 * h * ax)
        py += h * (vy + 0.5 * h * ay)
        pz += h * (vz + 0.5 * h * az)
        vx, vy, vz = vx + h * ax, vy + h * ay, vz + h * az
        q = propagate_attitude(q, gyro, h)
    return (px, py, pz), (vx, vy, vz), q


def odometry_at(odometry: 'History[OdometrySample]', imu: 'History[ImuSample]',
                stamp: float) -> Tuple[Vector3, Vector3, Quaternion]:
    """
    Position, velocity and attitude at stamp.

    Interpolated between the odometry samples around stamp when they are close; otherwise
    the nearer one is carried by the IMU, in steps of CARRY_STEP: check odometry.gap first.
    """
    before, after = odometry.around(stamp)
    if before is not None and after is not None:
        span = after.stamp - before.stamp
        if span <= INTERPOLATION_SPAN:
            f = (stamp - before.stamp) / span
            return (lerp3(before.position, after.position, f),
                    lerp3(before.velocity, after.velocity, f),
                    slerp(before.quaternion, after.quaternion, f))
        nearest = before if stamp - before.stamp <= after.stamp - stamp else after
    else:
        nearest = before if after is None else after
    if nearest.stamp == stamp:
        return nearest.position, nearest.velocity, nearest.quaternion
    return carry(nearest, imu, stamp)


def imu_from_odometry(history: 'History[OdometrySample]',
                      current: OdometrySample) -> ImuSample:
    """
    Gyro and specific force for engines without an IMU, from successive odometry.

    Body rates come from the odometry twist. Specific force is the velocity's difference
    against the newest earlier sample at least MIN_DIFFERENCE_SPAN older, less gravity, in
    the body frame (level at rest: [0, 0, -g]); with no such sample, gravity alone.
    """
    accel_ned = (0.0, 0.0, 0.0)
    if len(history):
        previous, _ = history.around(current.stamp - MIN_DIFFERENCE_SPAN)
        if previous is not None and current.stamp > previous.stamp:
            dt = current.stamp - previous.stamp
            accel_ned = tuple((c - p) / dt for c, p in zip(current.velocity, previous.velocity))
    w, x, y, z = current.quaternion
    force_ned = (accel_ned[0], accel_ned[1], accel_ned[2] - STANDARD_GRAVITY)
    specific_force = rotate((w, -x, -y, -z), force_ned)
    return ImuSample(stamp=current.stamp, gyro=current.gyro, accel=specific_force)
