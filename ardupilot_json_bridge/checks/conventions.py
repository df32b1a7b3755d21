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
import math
import threading
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ardupilot_json_bridge.checks import timing
from ardupilot_json_bridge.checks.kinematics import (
    fitted_rotation, interpolated, interval_means, matrix_rpy, Motion, rms, rotation_vectors,
    rounded_angles, ROUNDING, second_difference_means)
from ardupilot_json_bridge.checks.layout import layout_check
from ardupilot_json_bridge.checks.verdicts import Check, OK, UNDECIDED, WRONG
from ardupilot_json_bridge.core.frames import (
    quaternion_matrices, rpy_to_matrix, STANDARD_GRAVITY as GRAVITY)

# Motion needed to decide: rotation (rad/s), horizontal or vertical acceleration (m/s^2) and
# speed (m/s), as RMS over the window.
MIN_ROTATION = 0.2
MIN_ACCELERATION = 0.5
MIN_SPEED = 0.3
# Vertical speed (m/s) the IMU's climbing and sinking must swing by for odometry whose height
# never moves to be named as having none (Gazebo's OdometryPublisher at <dimensions>2).
MIN_VERTICAL_SWING = 1.0
# Rotation about a second axis below this share of the first leaves a mounting unfitted.
ONE_AXIS = 0.2
DEG_PER_RAD = math.degrees(1.0)
# Samples further than JOLT times the median (plus a floor: m/s^2 for accelerations, rad/s
# for rates) from the median are a landing's or a crash's jolt, left out of the fits.
JOLT = 5.0
JOLT_FLOOR = 2.0 * GRAVITY
JOLT_MARGIN = 3
JOLT_RATE_FLOOR = 2.0
# Seconds of samples a bag check judges (its last ones).
CHECK_WINDOW = 60.0
# Clock readings kept for the clock check: (message stamp, clock on receipt) pairs.
CLOCK_PAIRS = 200
# A stamp this far (s) behind the newest is a clock that started over, not a late sample.
CLOCK_JUMP = 1.0
# SERVO channels kept of each PWM frame (SITL sends 16, or 32).
PWM_CHANNELS = 16
# The highest frame rate (SITL frames per second of physics) add_frame holds a window of.
FRAMES_PER_SECOND = 2400


class ConventionChecker:
    """Holds a window of raw IMU and odometry samples and judges their conventions."""

    def __init__(self, imu_mounting_rpy: Sequence[float] = (0.0, 0.0, 0.0),
                 odom_twist_frame: str = 'child', window: float = 20.0,
                 vehicle: Optional[str] = None) -> None:
        self.mounting_rpy = tuple(float(a) for a in imu_mounting_rpy)
        # 'copter', 'plane' or 'rover' for the layout check; None tries a copter's layouts.
        self.vehicle = vehicle
        self.twist_frame = odom_twist_frame
        self.window = window
        self._w_first = False
        self._gyro_scale = 1.0
        self._fitted_mounting: Optional[np.ndarray] = None
        # Appended by a source's thread while another judges: the lock guards both deques.
        self._lock = threading.Lock()
        self._imu: Deque[Tuple[float, ...]] = deque()
        self._odometry: Deque[Tuple[float, ...]] = deque()
        self._clock: Deque[Tuple[float, float]] = deque(maxlen=CLOCK_PAIRS)
        self._pwm: Deque[Tuple[float, ...]] = deque()
        # Frames handed over by add_frame, not yet added (appended without the lock).
        self._frames: Deque[Tuple[Any, ...]] = deque(maxlen=max(1, math.ceil(
            window * FRAMES_PER_SECOND)))
        # Per topic, its newest stamp and the run of the clock it is in; the runs are counted,
        # the current one spans the stamps given.
        self._newest: Dict[str, Tuple[float, int]] = {}
        self._run = 0
        self._run_span = (math.inf, -math.inf)
        # Clock jumps seen, the last as (newest stamp before, stamp after); samples refused.
        self.jump_count = 0
        self.last_jump: Optional[Tuple[float, float]] = None
        self.rejected = {'IMU': 0, 'odometry': 0, 'PWM': 0}

    def add_imu(self, stamp: float, gyro: Sequence[float], accel: Sequence[float]) -> None:
        """Add one sensor_msgs/Imu: angular_velocity and linear_acceleration as published."""
        with self._lock:
            self._take_frames()
            self._add_imu(stamp, gyro, accel)
            self._trim(self._imu)

    def add_odometry(self, stamp: float, position: Sequence[float],
                     orientation_xyzw: Sequence[float], linear: Sequence[float]) -> None:
        """Add one nav_msgs/Odometry: pose position and orientation, twist linear."""
        with self._lock:
            self._take_frames()
            self._add_odometry(stamp, position, orientation_xyzw, linear)
            self._trim(self._odometry)

    def add_pwm(self, stamp: float, pwm: Sequence[int]) -> None:
        """Add the PWM SITL sent (us per SERVO channel) and the physics time it applies at."""
        with self._lock:
            self._take_frames()
            self._add_pwm(stamp, pwm)
            self._trim(self._pwm)

    def add_frame(self, stamp: float, gyro: Sequence[float], accel: Sequence[float],
                  position: Sequence[float], orientation_xyzw: Sequence[float],
                  linear: Sequence[float], pwm: Sequence[int]) -> None:
        """
        Hand over one lock-step frame (IMU, odometry and PWM at stamp) with one append.

        Takes no lock and converts nothing, so a lock-step engine's frame path pays one
        append; the samples go in (as add_imu, add_odometry and add_pwm) at the next judgement
        or add. Values must not change after the call (tuples). Only the newest window's
        worth at up to FRAMES_PER_SECOND is held until then.
        """
        self._frames.append((stamp, gyro, accel, position, orientation_xyzw, linear, pwm))

    def add_frames(self, frames: Sequence[Tuple[Any, ...]]) -> None:
        """Hand over lock-step frames, each add_frame's arguments as one tuple, oldest first."""
        self._frames.extend(frames)

    def _take_frames(self) -> None:
        """
        Add the frames handed over by add_frame, oldest first (under the lock).

        The frames that adding would trim at once are dropped unread first (_drop_unread). The
        samples are trimmed to the window once, after the last: the same samples as trimming
        after each add while time goes forward (a lock-step engine's frames do; a jump back
        starts over).
        """
        frames = self._frames
        if not frames:
            return
        try:
            self._drop_unread(frames)
        except (TypeError, ValueError, ArithmeticError):  # a stamp that is no number: read below
            pass
        try:
            while frames:
                stamp, gyro, accel, position, orientation, linear, pwm = frames.popleft()
                self._add_imu(stamp, gyro, accel)
                self._add_odometry(stamp, position, orientation, linear)
                self._add_pwm(stamp, pwm)
        finally:
            for samples in (self._imu, self._odometry, self._pwm):
                self._trim(samples)

    def _drop_unread(self, frames: Deque[Tuple[Any, ...]]) -> None:
        """
        Drop the oldest frames that adding would count for nothing and trim at once.

        A frame goes while it is further than the window from the newest (as _trim reckons)
        and it is finite, and time has not gone back to it: a frame that holds a value not
        finite is read (to be counted), and so is the one before time goes back (the jump is
        seen, from the stamp it was seen from).
        """
        newest = frames[-1][0]
        if not math.isfinite(newest):
            return
        previous = max((stamp for stamp, _ in self._newest.values()),
                       default=-math.inf) - CLOCK_JUMP
        dropped = None
        while len(frames) > 1:
            frame = frames[0]
            stamp = frame[0]
            if not (previous <= stamp and newest - stamp > self.window and math.isfinite(
                    sum(frame[1]) + sum(frame[2]) + sum(frame[3]) + sum(frame[4])
                    + sum(frame[5]) + sum(frame[6]))):
                break
            dropped = frames.popleft()
            previous = stamp
        if dropped is not None and frames[0][0] < previous:
            frames.appendleft(dropped)  # time went back: the frame before shows the jump

    def _add_imu(self, stamp: float, gyro: Sequence[float], accel: Sequence[float]) -> None:
        sample = (float(stamp), *map(float, gyro), *map(float, accel))
        if self._admitted(sample, 'IMU'):
            self._imu.append(sample)

    def _add_odometry(self, stamp: float, position: Sequence[float],
                      orientation_xyzw: Sequence[float], linear: Sequence[float]) -> None:
        sample = (float(stamp), *map(float, position), *map(float, orientation_xyzw),
                  *map(float, linear))
        if self._admitted(sample, 'odometry'):
            self._odometry.append(sample)

    def _add_pwm(self, stamp: float, pwm: Sequence[int]) -> None:
        channels = tuple(map(float, pwm[:PWM_CHANNELS]))
        sample = (float(stamp), *channels, *(0.0,) * (PWM_CHANNELS - len(channels)))
        if self._admitted(sample, 'PWM'):
            self._pwm.append(sample)

    def _admitted(self, sample: Tuple[float, ...], name: str) -> bool:
        """
        Count a sample the bridge would refuse (not finite), and start over on a clock jump.

        A stamp more than CLOCK_JUMP behind its topic's newest starts a new run of the clock
        (a simulator reset, a bag's loop): every sample before it is forgotten. Topics follow
        one another into the new run (each is seen to jump in turn); until a topic does, its
        samples of the old run are dropped.
        """
        if not all(map(math.isfinite, sample)):
            self.rejected[name] += 1
            return False
        stamp = sample[0]
        newest, run = self._newest.get(name, (None, self._run))
        in_run = self._run_span[0] - CLOCK_JUMP <= stamp <= self._run_span[1] + CLOCK_JUMP
        if newest is not None and stamp < newest - CLOCK_JUMP:
            if run == self._run or not in_run:
                self.jump_count += 1
                self.last_jump = (newest, stamp)
                self._run += 1
                self._run_span = (stamp, stamp)
                self._imu.clear()
                self._odometry.clear()
                self._clock.clear()
                self._pwm.clear()
            newest = None
        elif run != self._run:
            if not in_run:
                return False
            newest = None
        self._newest[name] = (stamp if newest is None else max(newest, stamp), self._run)
        self._run_span = (min(self._run_span[0], stamp), max(self._run_span[1], stamp))
        return True

    def clear(self) -> None:
        """Forget every sample: the simulator started over (a restart, a replay's loop)."""
        with self._lock:
            self._frames.clear()
            self._imu.clear()
            self._odometry.clear()
            self._clock.clear()
            self._pwm.clear()
            self._newest.clear()
            self._run_span = (math.inf, -math.inf)
            self.rejected = dict.fromkeys(self.rejected, 0)

    def add_clock(self, stamp: float, clock: float) -> None:
        """Add a message's stamp and the bridge's clock (s) when the message arrived."""
        with self._lock:
            self._clock.append((stamp, clock))

    def _trim(self, samples: Deque[Tuple[float, ...]]) -> None:
        while samples and abs(samples[-1][0] - samples[0][0]) > self.window:
            samples.popleft()

    def checks(self) -> List[Check]:
        """Return every verdict on the samples held now."""
        with self._lock:
            self._take_frames()
            imu = np.array(self._imu, dtype=float)
            odometry = np.array(self._odometry, dtype=float)
            clock = np.array(self._clock, dtype=float).reshape(-1, 2)
            pwm = np.array(self._pwm, dtype=float).reshape(-1, PWM_CHANNELS + 1)
        if len(imu) < 20 or len(odometry) < 20:
            return [Check('samples', UNDECIDED, f'{len(imu)} IMU and {len(odometry)} '
                                                'odometry samples',
                          'record a few seconds of both')]
        results = [timing.stamps_check('imu', imu[:, 0]),
                   timing.stamps_check('odometry', odometry[:, 0])]
        if any(self.rejected.values()):
            results.append(self._rejected())
        norms = np.linalg.norm(odometry[:, 4:8], axis=1)
        results.append(self._unit_quaternion(norms))
        if not np.all(norms > 1e-6):
            return results
        # Judged in time order, one sample per stamp (the stamps check named any repeat).
        imu, odometry = advancing(imu), advancing(odometry)
        if len(imu) < 20 or len(odometry) < 20:
            return results + [Check('samples', UNDECIDED, f'{len(imu)} IMU and '
                                    f'{len(odometry)} odometry samples of distinct stamps')]
        # Judged where both are: outside, the IMU would be held at its first or last value.
        inside = odometry[(odometry[:, 0] >= imu[0, 0]) & (odometry[:, 0] <= imu[-1, 0])]
        if len(inside) < 20:
            return results + [disjoint_check(imu[:, 0], odometry[:, 0])]
        odometry = inside
        motion = Motion(odometry)
        results += self._rotation_checks(imu, motion)
        if self._w_first:
            # Judge the rest as if the order were fixed, so only the cause is named.
            odometry[:, 4:8] = odometry[:, [5, 6, 7, 4]]
            motion = Motion(odometry)
        results.append(self._gravity(imu, motion))
        results.append(self._twist(motion))
        results.append(self._height(imu, motion))
        results += self._time_checks(imu, motion, clock)
        if len(pwm):
            results.append(layout_check(self.vehicle, advancing(pwm), imu, odometry,
                                        motion.roll_pitch_frd(), self._forward(odometry)))
        return results

    def _forward(self, odometry: np.ndarray) -> np.ndarray:
        """Return the speed along the body's x axis: the twist, turned into the body if need be."""
        twist = odometry[:, 8:11]
        if self.twist_frame == 'world':
            body_to_world = quaternion_matrices(odometry[:, [7, 4, 5, 6]])
            twist = np.einsum('nji,nj->ni', body_to_world, twist)
        return twist[:, 0]

    def _time_checks(self, imu: np.ndarray, motion: Motion, clock: np.ndarray) -> List[Check]:
        """Rates, the IMU-to-odometry offset and the clock, in the units already found."""
        gyro = imu[:, 1:4] / self._gyro_scale
        rates = motion.body_rates(motion.orientation)
        body_gyro = None if self._fitted_mounting is None else gyro @ self._fitted_mounting.T
        return [timing.imu_rate_check(imu[:, 0], gyro), timing.odometry_rate_check(motion),
                timing.offset_check(imu[:, 0], body_gyro, motion, rms(rates)),
                timing.clock_check(clock)]

    def _rejected(self) -> Check:
        counts = ' and '.join(f'{count} {name}' for name, count in self.rejected.items()
                              if count)
        return Check('samples: finite', WRONG, f'{counts} sample(s) with NaN or inf, left '
                                               'out of every check',
                     'publish finite values: the bridge drops such messages')

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
        self._w_first, self._gyro_scale, self._fitted_mounting = False, 1.0, None
        rates = motion.body_rates(motion.orientation)
        gyro = interval_means(imu[:, 0], imu[:, 1:4], motion.stamps[:-1], motion.stamps[1:])
        # A jolt the gyro and the attitude disagree on (their stamps apart) is left out; one
        # they agree on is motion like any other.
        kept = calm((gyro - rates,), JOLT_RATE_FLOOR)
        rates, gyro = rates[kept], gyro[kept]
        rotation = rms(rates)
        names = ('units: gyro', 'quaternion: order and motion', 'imu mounting')
        if rotation < MIN_ROTATION:
            if rms(gyro) > 5 * MIN_ROTATION:
                return [Check(names[0], UNDECIDED, f'gyro RMS {rms(gyro):.2f}, odometry '
                                                   f'attitude rates RMS {rotation:.3f}'),
                        Check(names[1], WRONG, f'orientation turns {rotation:.3f} rad/s RMS '
                                               f'while the gyro reads {rms(gyro):.2f}',
                              "publish the vehicle's orientation in odometry (it does not "
                              'change)'),
                        Check(names[2], UNDECIDED, 'needs rotation')]
            return [Check(name, UNDECIDED, f'rotation {rotation:.3f} rad/s RMS: turn the '
                                           'vehicle on all axes to decide') for name in names]
        checks = []
        scale = rms(gyro) / rotation
        if abs(scale - DEG_PER_RAD) / DEG_PER_RAD < 0.1:
            checks.append(Check(names[0], WRONG, f'gyro / attitude rates = {scale:.1f}',
                                'publish angular_velocity in rad/s (it reads deg/s)'))
            gyro = gyro / DEG_PER_RAD
            self._gyro_scale = DEG_PER_RAD
        else:
            checks.append(Check(names[0], OK, f'gyro / attitude rates = {scale:.3f}'))
        residual, mounting = self._mounting_fit(gyro, rates)
        swapped = motion.body_rates(motion.orientation[:, [1, 2, 3, 0]])[kept]
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
        spread = np.linalg.svd(rates, compute_uv=False)
        if spread[1] < ONE_AXIS * spread[0]:
            checks.append(self._one_axis_mounting(gyro, rates, rotation))
            return checks
        angles = rounded_angles(matrix_rpy(mounting))
        measured = f'sensor at rpy {list(angles)} deg in the body, fit to {relative:.1%}'
        if relative > 0.3:
            checks.append(Check(names[2], UNDECIDED, measured + ': no fixed rotation fits'))
        elif np.degrees(np.linalg.norm(rotation_vectors(
                (degrees_matrix(angles).T @ degrees_matrix(self.mounting_rpy))[None]))) > ROUNDING:
            checks.append(Check(names[2], WRONG, measured,
                                f'imu_mounting_rpy: {list(angles)}'))
        else:
            checks.append(Check(names[2], OK, measured))
        if relative <= 0.3:
            self._fitted_mounting = degrees_matrix(angles)
        return checks

    def _one_axis_mounting(self, gyro: np.ndarray, rates: np.ndarray, rotation: float) -> Check:
        """
        Judge the mounting from a turn about one axis (a rover's yaw, a plane's roll).

        Any rotation about that axis fits as well as none: no mounting can be fitted, only
        the configured one confirmed.
        """
        configured = degrees_matrix(self.mounting_rpy)
        fit = rms(gyro @ configured.T - rates) / rotation
        measured = (f'rotation about one axis only; imu_mounting_rpy {list(self.mounting_rpy)} '
                    f'fits to {fit:.1%}')
        if fit > 0.3:
            return Check('imu mounting', UNDECIDED, measured + ': turn about two axes to decide')
        self._fitted_mounting = configured
        return Check('imu mounting', OK, measured)

    @staticmethod
    def _mounting_fit(gyro: np.ndarray, rates: np.ndarray) -> Tuple[float, np.ndarray]:
        """Return the RMS residual and the rotation taking gyro (sensor) to body rates."""
        mounting = fitted_rotation(gyro, rates)
        return rms(gyro @ mounting.T - rates), mounting

    def _world_specific_force(self, imu: np.ndarray, motion: 'Motion') -> np.ndarray:
        """Return the IMU's specific force turned into the world by the odometry's attitude."""
        mounting = self._fitted_mounting
        if mounting is None:
            mounting = degrees_matrix(self.mounting_rpy)
        accel = odometry_paced(imu, motion) @ mounting.T
        return np.einsum('nij,nj->ni', motion.inner_rotations, accel)

    def _gravity(self, imu: np.ndarray, motion: 'Motion') -> Check:
        """Fit R f = alpha a + gamma up: units, sign, gravity and the world's vertical."""
        world = self._world_specific_force(imu, motion)
        acceleration = motion.acceleration
        kept, note = jolts_left_out(world, acceleration, motion.inner_stamps)
        world, acceleration = world[kept], acceleration[kept]
        up = np.tile([0.0, 0.0, 1.0], (len(world), 1))
        moving = rms(acceleration) > MIN_ACCELERATION
        if moving:
            design = np.stack([acceleration.reshape(-1), up.reshape(-1)], axis=1)
            (alpha, gamma), *_ = np.linalg.lstsq(design, world.reshape(-1), rcond=None)
        else:
            alpha, gamma = math.nan, float(np.mean(world[:, 2]))
        measured = (f'specific force in the world = {alpha:.2f} x acceleration + '
                    f'{gamma:.2f} up' if moving else
                    f'at rest: specific force {gamma:.2f} m/s^2 up') + note
        # What the fit leaves sideways: an IMU tilted against the attitude.
        explained = (alpha * acceleration if moving else 0.0) + gamma * up
        horizontal = float(np.max(np.abs(np.mean((world - explained)[:, :2], axis=0))))
        return Check('gravity', *gravity_verdict(alpha, gamma, horizontal, measured))

    def _height(self, imu: np.ndarray, motion: 'Motion') -> Check:
        """
        Odometry without height: z and the vertical speed never move while the IMU says so.

        Gazebo's OdometryPublisher publishes no z and no vertical rates at its default
        <dimensions>2: SITL would fly at height 0, with no wrong sign anywhere else.
        """
        height, climb = motion.position[:, 2], motion.twist[:, 2]
        spread = float(np.ptp(height))
        if spread > 0.0 or np.any(climb != 0.0):
            return Check('odometry: height', OK, f'height spans {spread:.2f} m')
        vertical = self._world_specific_force(imu, motion)[:, 2]
        swing = vertical_speed_swing(motion.inner_stamps, vertical)
        measured = (f'height {height[0]:.2f} m and vertical speed 0 throughout, while the IMU '
                    f'climbs and sinks by {swing:.1f} m/s')
        if swing > MIN_VERTICAL_SWING:
            return Check('odometry: height', WRONG, measured,
                         "publish height and vertical speed: Gazebo's OdometryPublisher needs "
                         '<dimensions>3 (its default, 2, leaves z and the vertical rates out)')
        return Check('odometry: height', UNDECIDED, measured + ": a ground vehicle's may be "
                     'flat; a flying one needs <dimensions>3 in Gazebo')

    def _twist(self, motion: 'Motion') -> Check:
        velocity = motion.position_rate
        if rms(velocity) < MIN_SPEED:
            return Check('twist frame', UNDECIDED, f'speed {rms(velocity):.2f} m/s RMS: move '
                                                   'the vehicle to decide')
        twist = motion.mid_twist
        in_child = np.einsum('nji,nj->ni', motion.mid_rotations, velocity)
        child_error, world_error = rms(twist - in_child), rms(twist - velocity)
        measured = (f'twist differs from the position rate by {child_error:.2f} m/s RMS read '
                    f'in the child frame, {world_error:.2f} in the world')
        found = 'child' if child_error < world_error else 'world'
        if min(child_error, world_error) > 0.3 * rms(velocity):
            return Check('twist frame', UNDECIDED, measured + ': neither fits')
        if abs(child_error - world_error) < 0.2 * rms(velocity):
            return Check('twist frame', UNDECIDED, measured + ': too little rotation to tell')
        if found != self.twist_frame:
            return Check('twist frame', WRONG, measured, f'odom_twist_frame: {found}')
        return Check('twist frame', OK, measured)


def vertical_speed_swing(stamps: np.ndarray, vertical: np.ndarray) -> float:
    """
    Return how far (m/s) the vertical speed swings, from the world's vertical specific force.

    Its mean (gravity, and any bias) and the integral's linear drift are taken out: what is
    left is the climbing and sinking the IMU felt.
    """
    if len(stamps) < 3:
        return 0.0
    acceleration = vertical - np.mean(vertical)
    steps = np.diff(stamps) * (acceleration[1:] + acceleration[:-1]) / 2.0
    speed = np.concatenate([[0.0], np.cumsum(steps)])
    trend = np.polyval(np.polyfit(stamps - stamps[0], speed, 1), stamps - stamps[0])
    return float(np.ptp(speed - trend))


def degrees_matrix(rpy: Sequence[float]) -> np.ndarray:
    """Return the rotation of fixed-axis roll, pitch, yaw given in degrees."""
    return rpy_to_matrix(*np.radians(rpy))


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


def advancing(samples: np.ndarray) -> np.ndarray:
    """Return samples (stamp first) sorted by stamp, the first of each repeated stamp only."""
    ordered = samples[np.argsort(samples[:, 0], kind='stable')]
    return ordered[np.diff(ordered[:, 0], prepend=-np.inf) > 0]


def calm(series: Sequence[np.ndarray], floor: float) -> np.ndarray:
    """
    Return which rows of every series (n, 3) stay within JOLT times the median of floor.

    A landing or a crash is over within a few samples, too fast for the odometry's
    differences to follow (they spread it over JOLT_MARGIN neighbours, which go too): rows
    far beyond the typical are a jolt, not a convention.
    """
    jolt = np.zeros(len(series[0]), dtype=bool)
    for values in series:
        off = np.linalg.norm(values - np.median(values, axis=0), axis=1)
        jolt |= off > JOLT * np.median(off) + floor
    spread = jolt.copy()
    for shift in range(1, JOLT_MARGIN + 1):
        spread[shift:] |= jolt[:-shift]
        spread[:-shift] |= jolt[shift:]
    return ~spread if np.sum(~spread) >= 20 else np.ones(len(jolt), dtype=bool)


def odometry_paced(imu: np.ndarray, motion: Motion) -> np.ndarray:
    """
    Return the IMU's accelerations at the odometry's inner stamps, as its acceleration sees them.

    An IMU at least twice as fast as the odometry is averaged over each acceleration's two
    odometry steps (second_difference_means); where it is slower, or does not cover both
    steps, it is interpolated. Averaged in the body: within two odometry steps the attitude
    turns too little to matter against gravity.
    """
    stamps = imu[:, 0]
    accel = interpolated(stamps, imu[:, 4:7], motion.inner_stamps)
    if len(stamps) < 2 or np.median(np.diff(stamps)) > np.median(np.diff(motion.stamps)) / 2:
        return accel
    covered = (motion.stamps[:-2] >= stamps[0]) & (motion.stamps[2:] <= stamps[-1])
    averaged = second_difference_means(stamps, imu[:, 4:7], motion.stamps)
    return np.where(covered[:, None], averaged, accel)


def jolts_left_out(world: np.ndarray, acceleration: np.ndarray,
                   stamps: np.ndarray) -> Tuple[np.ndarray, str]:
    """Return which samples the gravity fit keeps, and a note of the jolts it leaves out."""
    kept = calm((world, acceleration), JOLT_FLOOR)
    if np.all(kept):
        return kept, ''
    force = np.linalg.norm(world - np.median(world, axis=0), axis=1)
    worst = int(np.argmax(force))
    return kept, (f'; {int(np.sum(~kept))} sample(s) of a jolt left out (at {stamps[worst]:.2f} '
                  f's, {float(force[worst]):.0f} m/s^2 off the median specific force)')


def disjoint_check(imu_stamps: np.ndarray, odometry_stamps: np.ndarray) -> Check:
    """Return the verdict on IMU and odometry that share too little time to compare."""
    measured = (f'IMU stamps {imu_stamps[0]:.3f} to {imu_stamps[-1]:.3f} s, odometry '
                f'{odometry_stamps[0]:.3f} to {odometry_stamps[-1]:.3f} s: under 20 odometry '
                "samples within the IMU's span")
    return Check('time: imu to odometry', WRONG, measured,
                 'stamp IMU and odometry with the same clock: the physics time of each sample')


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
