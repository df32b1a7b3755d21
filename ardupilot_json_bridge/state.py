"""The latest sample of every input, and the one instant each SITL reply describes.

Sources push samples from their own threads; the link waits on one condition variable for a
primary sample (the IMU's, or the odometry's in odometry-only mode) newer than the one it last
served. A reply describes the primary sample's instant: the odometry is carried to that
instant, so 50 Hz odometry and 1 kHz IMU agree.

Replies advance one primary sample at a time, so every timestamp step SITL sees is one physics
step. SITL sets its frame rate from that step; jumping to the newest sample instead would make
the step equal SITL's own frame period, and a slow start would then lock SITL at a slow rate.
When SITL falls further behind than max_backlog, the reply skips to the newest sample.
"""

import collections
from dataclasses import dataclass
import math
import threading
import time
from typing import Callable, Deque, Dict, List, Optional, Tuple, Union

import numpy as np

from ardupilot_json_bridge.frames import GRAVITY_NED, propagate_attitude, quaternion_to_matrix
from ardupilot_json_bridge.protocol import SensorReply
from ardupilot_json_bridge.samples import (
    AirspeedSample, BatterySample, ImuSample, OdometrySample, RangeSample, RcSample,
    WindSample)
from ardupilot_json_bridge.stats import InputMeter

IMU = 'imu'
ODOMETRY = 'odometry'
WIND = 'wind'
AIRSPEED = 'airspeed'
BATTERY = 'battery'
RC = 'rc'
BACKLOG_SAMPLES = 512


def rangefinder_name(index: int) -> str:
    """Input name of rangefinder index (0-based), as logs and diagnostics show it."""
    return f'rangefinder_{index + 1}'


@dataclass(frozen=True)
class StateSettings:
    """How the state judges its inputs (seconds of physics time unless said otherwise)."""

    odometry_only: bool = False
    max_odometry_lag: float = 0.25
    max_optional_age: float = 1.0
    max_backlog: float = 0.05
    rangefinder_count: int = 0


@dataclass(slots=True)
class Instant:
    """Consistent samples for one reply, taken under the lock; stamp is the primary's."""

    sequence: int
    stamp: float
    skipped: int
    imu: ImuSample
    odometry: OdometrySample
    ranges: Tuple[Optional[RangeSample], ...]
    wind: Optional[WindSample]
    airspeed: Optional[AirspeedSample]
    battery: Optional[BatterySample]
    rc: Optional[RcSample]


@dataclass(frozen=True)
class Unavailable:
    """Why no reply can be built now: the input at fault and what is wrong with it."""

    input: str
    reason: str

    def __str__(self) -> str:
        return f'{self.input}: {self.reason}'


class SensorState:
    """Thread-safe store of the latest samples, with a blocking wait for a fresh instant."""

    def __init__(self, settings: StateSettings,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._condition = threading.Condition()
        self._imu: Optional[ImuSample] = None
        self._backlog: Deque[Tuple[int, ImuSample]] = collections.deque(maxlen=BACKLOG_SAMPLES)
        self._odometry: Optional[OdometrySample] = None
        self._ranges: List[Optional[RangeSample]] = [None] * settings.rangefinder_count
        self._wind: Optional[WindSample] = None
        self._airspeed: Optional[AirspeedSample] = None
        self._battery: Optional[BatterySample] = None
        self._rc: Optional[RcSample] = None
        self._sequence = 0
        self._served = 0
        self._closed = False
        names = [ODOMETRY] if settings.odometry_only else [IMU, ODOMETRY]
        names += [rangefinder_name(i) for i in range(settings.rangefinder_count)]
        names += [WIND, AIRSPEED, BATTERY, RC]
        self.meters: Dict[str, InputMeter] = {name: InputMeter(name) for name in names}

    def _record(self, name: str, stamp: float) -> None:
        self.meters[name].record(self._clock(), stamp)

    def push_imu(self, sample: ImuSample) -> None:
        if self.settings.odometry_only:
            return
        with self._condition:
            self._record(IMU, sample.stamp)
            self._add_primary(sample)

    def push_odometry(self, sample: OdometrySample) -> None:
        with self._condition:
            self._record(ODOMETRY, sample.stamp)
            previous, self._odometry = self._odometry, sample
            if self.settings.odometry_only:
                self._add_primary(imu_from_odometry(previous, sample, self._imu))

    def _add_primary(self, sample: ImuSample) -> None:
        self._imu = sample
        self._sequence += 1
        self._backlog.append((self._sequence, sample))
        self._condition.notify_all()

    def push_range(self, index: int, sample: RangeSample) -> None:
        if not 0 <= index < len(self._ranges):
            raise IndexError(f'rangefinder {index + 1} is not configured')
        with self._condition:
            self._record(rangefinder_name(index), sample.stamp)
            self._ranges[index] = sample

    def push_wind(self, sample: WindSample) -> None:
        with self._condition:
            self._record(WIND, sample.stamp)
            self._wind = sample

    def push_airspeed(self, sample: AirspeedSample) -> None:
        with self._condition:
            self._record(AIRSPEED, sample.stamp)
            self._airspeed = sample

    def push_battery(self, sample: BatterySample) -> None:
        with self._condition:
            self._record(BATTERY, sample.stamp)
            self._battery = sample

    def push_rc(self, sample: RcSample) -> None:
        with self._condition:
            self._record(RC, sample.stamp)
            self._rc = sample

    def count_rejected(self, name: str) -> None:
        """Count a message of input name that could not become a sample."""
        with self._condition:
            self.meters[name].rejected += 1

    @property
    def primary(self) -> str:
        """The input whose samples set the reply instants."""
        return ODOMETRY if self.settings.odometry_only else IMU

    def latest_stamp(self) -> Optional[float]:
        """Stamp of the newest primary sample, None before the first."""
        with self._condition:
            return None if self._imu is None else self._imu.stamp

    def wait_for_instant(self, after: int, timeout: float) -> Union[Instant, Unavailable]:
        """Block until a primary sample newer than sequence after is usable, or timeout."""
        deadline = self._clock() + timeout
        with self._condition:
            while True:
                result = self._instant_locked(after)
                remaining = deadline - self._clock()
                if isinstance(result, Instant) or remaining <= 0.0 or self._closed:
                    return result
                self._condition.wait(remaining)

    def mark_served(self, sequence: int) -> None:
        """The link answered SITL with the instant of this sequence: wake a paced source."""
        with self._condition:
            self._served = max(self._served, sequence)
            self._condition.notify_all()

    def wait_until_served(self, timeout: Optional[float] = None) -> bool:
        """Block a producer until the link has served every primary sample pushed so far."""
        with self._condition:
            return self._condition.wait_for(
                lambda: self._closed or self._served >= self._sequence, timeout)

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._closed

    def close(self) -> None:
        """Wake every waiter for good (shutdown)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def _next_primary(self, after: int) -> Tuple[int, ImuSample, int]:
        """The primary sample right after sequence after, or the newest if SITL lags.

        A session's first reply (after 0) starts at the newest sample: nothing was skipped.
        """
        backlog = self._backlog
        newest_sequence, newest = backlog[-1]
        if after == 0:
            return newest_sequence, newest, 0
        oldest_sequence = backlog[0][0]
        index = max(0, after + 1 - oldest_sequence)
        sequence, sample = backlog[index]
        if newest.stamp - sample.stamp > self.settings.max_backlog:
            return newest_sequence, newest, newest_sequence - sequence
        return sequence, sample, max(0, oldest_sequence - after - 1)

    def _instant_locked(self, after: int) -> Union[Instant, Unavailable]:
        odometry = self._odometry
        primary = self.primary
        if self._imu is None or (odometry is None and self.settings.odometry_only):
            return Unavailable(primary, 'no message received yet')
        if self._sequence <= after:
            age = self.meters[primary].age(self._clock())
            return Unavailable(primary, f'no sample newer than the last reply for {age:.2f} s '
                                        '(simulation paused or stopped?)')
        sequence, imu, skipped = self._next_primary(after)
        if odometry is None:
            return Unavailable(ODOMETRY, 'no message received yet')
        lag = imu.stamp - odometry.stamp
        if abs(lag) > self.settings.max_odometry_lag:
            return Unavailable(ODOMETRY, f'stamp is {lag:+.3f} s from the IMU sample '
                                         f'(max_odometry_lag {self.settings.max_odometry_lag} s)')
        return Instant(
            sequence=sequence, stamp=imu.stamp, skipped=skipped, imu=imu, odometry=odometry,
            ranges=tuple(self._fresh(r, imu.stamp) for r in self._ranges),
            wind=self._fresh(self._wind, imu.stamp),
            airspeed=self._fresh(self._airspeed, imu.stamp),
            battery=self._fresh(self._battery, imu.stamp), rc=self._fresh(self._rc, imu.stamp))

    def _fresh(self, sample, stamp: float):
        if sample is None or abs(stamp - sample.stamp) > self.settings.max_optional_age:
            return None
        return sample


def imu_from_odometry(previous: Optional[OdometrySample], current: OdometrySample,
                      last: Optional[ImuSample]) -> ImuSample:
    """Gyro and specific force for engines without an IMU, from successive odometry.

    Body rates come from the odometry twist; specific force is the velocity's finite
    difference less gravity, in the body frame (level at rest: [0, 0, -g]).
    """
    dt = 0.0 if previous is None else current.stamp - previous.stamp
    if dt > 0.0:
        accel_ned = (np.subtract(current.velocity, previous.velocity)) / dt
    elif last is not None:
        ned_from_frd = quaternion_to_matrix(current.quaternion)
        accel_ned = ned_from_frd @ np.asarray(last.accel) + GRAVITY_NED
    else:
        accel_ned = np.zeros(3)
    specific_force = quaternion_to_matrix(current.quaternion).T @ (accel_ned - GRAVITY_NED)
    return ImuSample(stamp=current.stamp, gyro=current.gyro,
                     accel=tuple(float(v) for v in specific_force))


def windvane(wind_ned: Tuple[float, float, float], velocity_ned: Tuple[float, float, float],
             quaternion: Tuple[float, float, float, float]) -> Tuple[float, float]:
    """Apparent wind: direction (rad clockwise from the nose, 0 head to wind) and speed.

    Values too large to combine give NaN, which the encoder leaves out of the reply.
    """
    with np.errstate(over='ignore', invalid='ignore'):
        air_ned = np.subtract(wind_ned, velocity_ned)
        air_body = quaternion_to_matrix(quaternion).T @ air_ned
    direction = math.atan2(-air_body[1], -air_body[0])
    return direction, math.hypot(air_body[0], air_body[1])


def build_reply(instant: Instant, timestamp: float, no_time_sync: bool = False,
                no_lockstep: bool = False) -> SensorReply:
    """The reply for one instant: odometry carried from its stamp to the instant's."""
    odometry, imu = instant.odometry, instant.imu
    dt = instant.stamp - odometry.stamp
    px, py, pz = odometry.position
    vx, vy, vz = odometry.velocity
    position = (px + vx * dt, py + vy * dt, pz + vz * dt)
    quaternion = propagate_attitude(odometry.quaternion, imu.gyro, dt)
    wind = instant.wind
    return SensorReply(
        timestamp=timestamp, gyro=imu.gyro, accel_body=imu.accel, position=position,
        velocity=odometry.velocity, quaternion=quaternion,
        rangefinders=tuple(None if r is None else r.value for r in instant.ranges),
        velocity_wind=None if wind is None else wind.value,
        windvane=None if wind is None else windvane(wind.value, odometry.velocity, quaternion),
        airspeed=None if instant.airspeed is None else instant.airspeed.value,
        battery=None if instant.battery is None else instant.battery.value,
        rc=() if instant.rc is None else instant.rc.value,
        no_time_sync=no_time_sync, no_lockstep=no_lockstep)
