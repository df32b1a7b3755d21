"""
Short histories of every input, and the one instant each SITL reply describes.

Sources push samples from their own threads; the link asks for an instant and waits on one
condition variable until the samples reach it. Two pacings:

- grid (free-running simulators: the node, a replay at a rate): the link asks for SITL's own
  frame instants, t0 + k / frame_rate. An instant is ready once the primary input (the IMU, or
  the odometry in odometry-only mode) reaches it, or is at most `horizon` short of it; values
  are interpolated between the samples around it, or carried past them (see alignment).
- samples (lock-step sources that make one sample per frame: replay --rate 0, MuJoCo): each
  reply serves the next primary sample, at its own stamp.
"""

from dataclasses import dataclass
import logging
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple, Union

from ardupilot_json_bridge.core.alignment import (
    Appended, History, imu_at, imu_from_odometry, odometry_at, RESET_JUMP)
from ardupilot_json_bridge.core.clocks import clocks_apart, clocks_differ, SAME_INSTANT
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.samples import (
    AirspeedSample, BatterySample, ImuSample, OdometrySample, RangeSample, RcSample, Stamped,
    Vector3, WindSample)
from ardupilot_json_bridge.core.settings import GRID, StateSettings
from ardupilot_json_bridge.core.stats import InputMeter

IMU = 'imu'
ODOMETRY = 'odometry'
WIND = 'wind'
AIRSPEED = 'airspeed'
BATTERY = 'battery'
RC = 'rc'
# Extra history beyond the longest setting, so an instant always has samples on both sides.
HISTORY_MARGIN = 0.1
# An input whose last message arrived within this long (wall s) is still being published.
STILL_PUBLISHED = 1.0
# Seconds from the first SITL frame that finds an input with no message yet during which that is
# told at INFO, not WARNING: SITL's first frames often come before a simulator starting beside
# it publishes, and SITL resends them (1.1 s). After it, a simulator that never published is a
# fault.
STARTUP_GRACE = 5.0


def rangefinder_name(index: int) -> str:
    """Input name of rangefinder index (0-based), as logs and diagnostics show it."""
    return f'rangefinder_{index + 1}'


def history_length(settings: StateSettings) -> float:
    """Physics seconds of samples to keep: as far back as any setting may ask for."""
    return max(settings.max_backlog, settings.max_odometry_lag, settings.horizon,
               settings.max_optional_age) + HISTORY_MARGIN


def input_names(settings: StateSettings) -> List[str]:
    """Every input a state with these settings meters, mandatory ones first."""
    names = [ODOMETRY] if settings.odometry_only else [IMU, ODOMETRY]
    names += [rangefinder_name(i) for i in range(settings.rangefinder_count)]
    return names + [WIND, AIRSPEED, BATTERY, RC]


@dataclass(slots=True)
class Instant:
    """
    Every value of one reply, aligned to stamp (the source's physics time).

    sequence numbers primary samples (samples pacing); skipped counts samples (samples
    pacing) passed over to catch up.
    """

    stamp: float
    sequence: int
    skipped: int
    gyro: Vector3
    accel: Vector3
    position: Vector3
    velocity: Vector3
    quaternion: Tuple[float, float, float, float]
    ranges: Tuple[Optional[float], ...]
    wind: Optional[Vector3]
    airspeed: Optional[float]
    battery: Optional[Tuple[float, float]]
    rc: Optional[Tuple[float, ...]]


@dataclass(frozen=True)
class Unavailable:
    """
    Why no reply can be built now: the input at fault and what is wrong with it.

    level is the logging level the fault deserves: ERROR for inputs on two clocks, INFO for an
    input with no message yet while the simulator may still be starting (STARTUP_GRACE),
    WARNING otherwise. waits is False where no newer sample can make the instant answerable.
    """

    input: str
    reason: str
    sequence: int = 0
    level: int = logging.WARNING
    waits: bool = True

    def __str__(self) -> str:
        return f'{self.input}: {self.reason}'


class SensorState:
    """Thread-safe histories of every input, with blocking waits for instants."""

    def __init__(self, settings: StateSettings,
                 clock: Callable[[], float] = time.monotonic,
                 logger: Optional[logging.Logger] = None) -> None:
        self._settings = settings
        self.warnings = RateLimitedLog(logger or logging.getLogger('ardupilot_json_bridge.state'))
        self._clock = clock
        self._condition = threading.Condition()
        keep = history_length(settings)
        self._imu: History[ImuSample] = History(keep)
        self._odometry: History[OdometrySample] = History(keep)
        names = input_names(settings)
        optional = names[1 if settings.odometry_only else 2:]
        self._optional: Dict[str, History[Stamped]] = {n: History(keep) for n in optional}
        self._range_names = tuple(optional[:settings.rangefinder_count])
        self._sequence = 0
        self._served = 0
        self._resets = 0
        # The newest odometry stamp when the IMU's clock last went back (a loop, a reset).
        self._odometry_at_reset: Optional[float] = None
        self._jumped_forward = False
        self._two_clocks: Optional[Tuple[float, float]] = None
        # False once a lock-step frame waited its whole timeout for odometry in vain, until a
        # frame is answered: later frames short of odometry are decided at once.
        self._await_odometry = True
        self._closed = False
        # When a frame first found an input with no message yet (STARTUP_GRACE counts from it).
        self._first_missing: Optional[float] = None
        self.meters: Dict[str, InputMeter] = {n: InputMeter(n) for n in names}

    @property
    def settings(self) -> StateSettings:
        return self._settings

    @settings.setter
    def settings(self, settings: StateSettings) -> None:
        """Apply new settings while running: the histories keep as long as they now need."""
        with self._condition:
            self._settings = settings
            keep = history_length(settings)
            for history in (self._imu, self._odometry, *self._optional.values()):
                history.keep = keep

    @property
    def keep(self) -> float:
        """Physics seconds of samples the histories keep."""
        return self._imu.keep

    @property
    def primary(self) -> str:
        """Return the input whose samples pace the replies."""
        return ODOMETRY if self.settings.odometry_only else IMU

    @property
    def resets(self) -> int:
        """How many times the primary input's stamps jumped back (simulation resets)."""
        return self._resets

    @property
    def two_clocks(self) -> Optional[Tuple[float, float]]:
        """
        Newest stamps of both clocks when the last reset came after a jump forward, else None.

        The primary's stamps jumping forward then back by more than RESET_JUMP are two
        publishers on one topic with two clocks, not a simulation restarting.
        """
        return self._two_clocks

    def _record(self, name: str, stamp: float, outcome: str, newest: Optional[float],
                frames: int = 1) -> bool:
        """
        Meter one sample; warn (rate-limited) and return False if it was refused.

        frames: the sample stands for that many, evenly spaced up to it (push_instant).
        """
        meter = self.meters[name]
        meter.record(self._clock(), frames)
        if outcome is Appended.REPEATED or outcome is Appended.LATE:
            meter.out_of_order += 1
            what = 'repeats the stamp' if outcome is Appended.REPEATED else 'is older than'
            self.warnings.warning(f'{outcome}:{name}', f'dropped a {name} sample: its stamp '
                                  f'{stamp:.6f} s {what} the newest {newest:.6f} s '
                                  f'({meter.out_of_order} dropped so far; does the simulator '
                                  'stamp every message with its own physics time?)')
            return False
        if outcome is Appended.ADDED and newest is not None and name in (IMU, ODOMETRY):
            meter.note_stamp_gap((stamp - newest) / frames)
        return True

    def push_imu(self, sample: ImuSample) -> None:
        if self.settings.odometry_only:
            return
        with self._condition:
            self._push_imu_locked(sample)

    def _push_imu_locked(self, sample: ImuSample, frames: int = 1) -> None:
        newest = self._imu.newest_stamp
        self._note_jump(sample.stamp, newest)
        self._push_primary(IMU, sample, self._imu.append(sample.stamp, sample), newest, frames)

    def push_odometry(self, sample: OdometrySample, frames: int = 1) -> None:
        with self._condition:
            if self.settings.odometry_only:
                newest = self._odometry.newest_stamp
                self._note_jump(sample.stamp, newest)
                derived = imu_from_odometry(self._odometry, sample)
                outcome = self._odometry.append(sample.stamp, sample)
                if outcome is Appended.RESET:
                    self._imu.clear()
                if outcome is Appended.ADDED or outcome is Appended.RESET:
                    self._imu.append(derived.stamp, derived)
                self._push_primary(ODOMETRY, sample, outcome, newest, frames)
            elif self._append_odometry_locked(sample, frames):
                self._await_odometry |= self._odometry_caught_up(sample.stamp)
                self._condition.notify_all()

    def _append_odometry_locked(self, sample: OdometrySample, frames: int = 1) -> bool:
        """Append odometry beside an IMU; whether it was taken (fresh)."""
        newest = self._odometry.newest_stamp
        return self._record(ODOMETRY, sample.stamp, self._odometry.append(sample.stamp, sample),
                            newest, frames)

    def _odometry_caught_up(self, stamp: float) -> bool:
        """Whether odometry at stamp is within max_odometry_lag of the newest IMU sample."""
        newest_imu = self._imu.newest_stamp
        return (newest_imu is None
                or abs(newest_imu - stamp) <= self.settings.max_odometry_lag)

    def push_frame(self, imu: ImuSample, odometry: OdometrySample, frames: int = 1) -> None:
        """
        Push one instant's odometry then IMU under one lock (a lock-step engine's frame).

        The same as push_odometry then push_imu, with one lock and one wake-up. frames: the
        instant is the newest of that many, evenly spaced, metered as all of them.
        """
        if self.settings.odometry_only:
            self.push_odometry(odometry, frames)
            return
        with self._condition:
            fresh = self._append_odometry_locked(odometry, frames)
            sequence = self._sequence
            self._push_imu_locked(imu, frames)
            if fresh:
                self._await_odometry |= self._odometry_caught_up(odometry.stamp)
            if fresh and self._sequence == sequence:
                self._condition.notify_all()  # the IMU was refused: wake odometry's waiters

    def push_instant(self, instant: Instant, served: bool = False, frames: int = 1) -> int:
        """
        Push a lock-step engine's frame, given as the instant it is; return its sequence.

        served: the link answered SITL with this instant already, before pushing it (it is
        the newest sample, at its own stamp: what wait_for_sample would have returned), so
        it is marked served and its optional values counted used, as serving it would have.
        frames: the newest of that many frames served, evenly spaced (the compiled frame
        loop's batch): the histories keep it, the meters count them all.
        """
        stamp = instant.stamp
        with self._condition:
            self.push_frame(ImuSample(stamp, instant.gyro, instant.accel),
                            OdometrySample(stamp, instant.position, instant.velocity,
                                           instant.quaternion, instant.gyro), frames)
            if (instant.ranges or instant.wind is not None or instant.airspeed is not None
                    or instant.battery is not None or instant.rc is not None):
                self._push_optional_values(instant, served, frames)
            if served:
                self._await_odometry = True
                self._served = max(self._served, self._sequence)
                self._condition.notify_all()
            return self._sequence

    def _push_optional_values(self, instant: Instant, served: bool, frames: int) -> None:
        """Push the instant's optional values (under the lock); served: count them used."""
        optional = list(zip(self._range_names, instant.ranges))
        optional += [(WIND, instant.wind), (AIRSPEED, instant.airspeed),
                     (BATTERY, instant.battery), (RC, instant.rc)]
        for name, value in optional:
            if value is not None:
                self._push_optional(name, Stamped(instant.stamp, value), frames)
                if served:
                    self.meters[name].used += frames

    def _note_jump(self, stamp: float, newest: Optional[float]) -> None:
        """Note a primary stamp jumping forward: a jump back after it is two clocks."""
        if newest is not None and stamp - newest > RESET_JUMP:
            self._jumped_forward = True

    def _push_primary(self, name: str, sample: ImuSample, outcome: str,
                      newest: Optional[float], frames: int = 1) -> None:
        if not self._record(name, sample.stamp, outcome, newest, frames):
            return
        if outcome is Appended.RESET:
            self._resets += 1
            self._await_odometry = True
            self._two_clocks = (newest, sample.stamp) if self._jumped_forward else None
            self._odometry_at_reset = self._odometry.newest_stamp
            self._jumped_forward = False
        self._sequence += 1
        self._condition.notify_all()

    def _push_optional(self, name: str, sample: Stamped, frames: int = 1) -> None:
        with self._condition:
            history = self._optional[name]
            newest = history.newest_stamp
            self._record(name, sample.stamp, history.append(sample.stamp, sample), newest,
                         frames)

    def push_range(self, index: int, sample: RangeSample) -> None:
        if not 0 <= index < len(self._range_names):
            raise IndexError(f'rangefinder {index + 1} is not configured')
        self._push_optional(self._range_names[index], sample)

    def push_wind(self, sample: WindSample) -> None:
        self._push_optional(WIND, sample)

    def push_airspeed(self, sample: AirspeedSample) -> None:
        self._push_optional(AIRSPEED, sample)

    def push_battery(self, sample: BatterySample) -> None:
        self._push_optional(BATTERY, sample)

    def push_rc(self, sample: RcSample) -> None:
        self._push_optional(RC, sample)

    def count_rejected(self, name: str) -> None:
        """Count a message of input name that could not become a sample."""
        with self._condition:
            self.meters[name].rejected += 1

    def newest_primary(self) -> Optional[float]:
        """Stamp of the newest primary sample, None before the first."""
        with self._condition:
            return self._imu.newest_stamp

    def wait_for_primary(self, timeout: float) -> Optional[float]:
        """Block until there is a primary sample; its newest stamp, or None on timeout."""
        with self._condition:
            self._condition.wait_for(lambda: self._closed or len(self._imu) > 0, timeout)
            return self._imu.newest_stamp

    def wait_for_stamp(self, stamp: float, timeout: float,
                       resets: Optional[int] = None) -> Union[Instant, Unavailable]:
        """
        Block until the primary input reaches stamp (less the horizon); its instant.

        A sample SAME_INSTANT or less before stamp reaches it: the same instant, rounded
        otherwise by the simulator's clock.

        With resets (the count the caller knows), a clock jump back while waiting ends the
        wait at once: the instant asked for belongs to the clock before the jump.
        """
        deadline = self._clock() + timeout
        reached = stamp - self.settings.horizon - SAME_INSTANT
        with self._condition:
            while True:
                newest = self._imu.newest_stamp
                if resets is not None and resets != self._resets:
                    return Unavailable(self.primary, f'physics time went back from '
                                                     f'{stamp:.3f} to {newest:.3f} s')
                if newest is not None and newest >= reached:
                    return self._instant_locked(stamp, self._sequence, 0)
                remaining = deadline - self._clock()
                if remaining <= 0.0 or self._closed:
                    return self._not_reached(stamp, newest)
                self._condition.wait(remaining)

    def not_received(self, name: str, sequence: int = 0) -> Unavailable:
        """
        Say that input name has had no message yet: at INFO within STARTUP_GRACE, then WARNING.

        The grace counts from the first frame that found an input missing, not from the
        state's start: a bridge may wait long before SITL and its simulator start together,
        and the simulator publishes a moment after SITL's first frame. One that has not
        published STARTUP_GRACE later is a fault worth a warning.
        """
        now = self._clock()
        if self._first_missing is None:
            self._first_missing = now
        if now - self._first_missing < STARTUP_GRACE:
            return Unavailable(name, 'no message received yet (starting up: SITL sends the '
                                     'frame again)', sequence, logging.INFO)
        return Unavailable(name, 'no message received yet', sequence)

    def _not_reached(self, stamp: float, newest: Optional[float]) -> Unavailable:
        primary = self.primary
        if newest is None:
            return self.not_received(primary)
        age = self.meters[primary].age(self._clock())
        return Unavailable(primary, f'samples stop {stamp - newest:.4f} s short of the '
                                    f'instant SITL asks for; none newer for {age:.2f} s '
                                    '(simulation paused or stopped?)')

    def wait_for_sample(self, after: int, timeout: float) -> Union[Instant, Unavailable]:
        """
        Block until the primary sample after sequence after can be served; its instant.

        When SITL lags the newest sample by more than max_backlog, the newest is served. A
        sample without odometry near it waits for odometry until the timeout (late odometry
        may still come), unless no newer odometry can help, or the last frame that waited for
        odometry got none: the lag is established and each frame is decided at once, until
        the odometry catches up.
        """
        deadline = self._clock() + timeout
        waited_for_odometry = False
        with self._condition:
            while True:
                result = self._next_sample_locked(after)
                if isinstance(result, Instant):
                    self._await_odometry = True
                    return result
                for_odometry = result.input == ODOMETRY and self.primary != ODOMETRY
                remaining = deadline - self._clock()
                if (not result.waits or self._closed or remaining <= 0.0
                        or (for_odometry and not self._await_odometry)):
                    if waited_for_odometry and for_odometry and remaining <= 0.0:
                        self._await_odometry = False
                    return result
                self._condition.wait(remaining)
                waited_for_odometry = for_odometry

    def _next_sample_locked(self, after: int) -> Union[Instant, Unavailable]:
        if self._sequence <= after:
            newest = self._imu.newest_stamp
            if newest is None:
                return self.not_received(self.primary)
            age = self.meters[self.primary].age(self._clock())
            return Unavailable(self.primary, f'no sample newer than the last reply for '
                                             f'{age:.2f} s (simulation paused or stopped?)')
        stamps = self._imu.stamps
        newest_sequence = self._sequence
        index = max(0, len(stamps) - (newest_sequence - after))
        skipped = 0
        if after == 0 or stamps[-1] - stamps[index] > self.settings.max_backlog:
            skipped = 0 if after == 0 else len(stamps) - 1 - index
            index = len(stamps) - 1
        sequence = newest_sequence - (len(stamps) - 1 - index)
        return self._instant_locked(stamps[index], sequence, skipped)

    def _instant_locked(self, stamp: float, sequence: int,
                        skipped: int) -> Union[Instant, Unavailable]:
        odometry, imu = self._odometry, self._imu
        if not len(odometry):
            return self.not_received(ODOMETRY, sequence)
        if len(imu) and odometry.stamps[-1] == stamp == imu.stamps[-1]:
            # A lock-step engine's newest IMU and odometry are the instant itself: what
            # imu_at and odometry_at return at their exact stamps, without the searches.
            now, pose = imu.samples[-1], odometry.samples[-1]
            gyro, accel = now.gyro, now.accel
            position, velocity, quaternion = pose.position, pose.velocity, pose.quaternion
        else:
            gap = odometry.gap(stamp)
            if gap > self.settings.max_odometry_lag:
                return self._odometry_too_far(stamp, gap, sequence)
            gyro, accel = imu_at(imu, stamp)
            position, velocity, quaternion = odometry_at(odometry, imu, stamp)
        optional = self._optional
        return Instant(
            stamp=stamp, sequence=sequence, skipped=skipped, gyro=gyro, accel=accel,
            position=position, velocity=velocity, quaternion=quaternion,
            ranges=tuple(self._value_at(name, stamp) for name in self._range_names),
            wind=self._value_at(WIND, stamp) if len(optional[WIND]) else None,
            airspeed=self._value_at(AIRSPEED, stamp) if len(optional[AIRSPEED]) else None,
            battery=self._value_at(BATTERY, stamp) if len(optional[BATTERY]) else None,
            rc=self._value_at(RC, stamp) if len(optional[RC]) else None)

    def _odometry_too_far(self, stamp: float, gap: float, sequence: int) -> Unavailable:
        """
        Why the nearest odometry is further than max_odometry_lag: stopped, late or another clock.

        Decided from the newest samples alone, before any carrying: its cost grows with the gap.
        Only another clock is an ERROR; odometry that is merely late may still arrive, unless
        the newest is already past the instant (a newer one would be further still).
        """
        reason = (f'nearest sample is {gap:.3f} s from the instant (max_odometry_lag '
                  f'{self.settings.max_odometry_lag} s)')
        odometry, imu = self._odometry.newest_stamp, self._imu.newest_stamp
        waits = odometry < stamp
        age = self.meters[ODOMETRY].age(self._clock())
        if age is not None and age > STILL_PUBLISHED:
            return Unavailable(ODOMETRY, f'{reason}; none received for {age:.2f} s (odometry '
                                         'stopped?)', sequence, waits=waits)
        if odometry > imu and odometry == self._odometry_at_reset:
            # The IMU's clock went back and no odometry came since: it follows in a moment.
            return Unavailable(ODOMETRY, f"{reason}: the IMU's clock went back to {imu:.3f} s "
                                         f'and odometry (newest {odometry:.3f} s) has not '
                                         'followed yet', sequence)
        wall_now = time.time()
        if clocks_differ(odometry, imu, wall_now, RESET_JUMP):
            apart = clocks_apart(ODOMETRY, odometry, 'IMU', imu, wall_now)
            return Unavailable(ODOMETRY, f'{reason}: {apart}', sequence, logging.ERROR, False)
        side = 'lags' if odometry <= imu else 'is ahead of'
        return Unavailable(ODOMETRY, f'{reason}: odometry {side} the IMU by '
                                     f'{abs(imu - odometry):.3f} s: published too rarely or '
                                     'stamped late', sequence, waits=waits)

    def count_unanswered(self, unavailable: Unavailable) -> None:
        """
        Count a frame left unanswered for the input at fault, and keep the reason.

        Not one left unanswered at INFO (the simulator still starting): that is no fault of the
        input, and /diagnostics would call it one.
        """
        if unavailable.level < logging.WARNING:
            return
        with self._condition:
            meter = self.meters.get(unavailable.input)
            if meter is not None:
                meter.unanswered += 1
                meter.fault = unavailable.reason
                meter.fault_is_error = unavailable.level >= logging.ERROR

    def _value_at(self, name: str, stamp: float):
        """Return the optional input's latest value at stamp; None (and counted) if too far off."""
        history = self._optional[name]
        if not len(history):
            return None
        before, after = history.around(stamp)
        sample = before if before is not None else after
        if abs(stamp - sample.stamp) > self.settings.max_optional_age:
            meter = self.meters[name]
            meter.left_out += 1
            meter.left_out_gap = stamp - sample.stamp
            return None
        self.meters[name].used += 1
        return sample.value

    def mark_served(self, sequence: int) -> None:
        """Record that the link answered SITL with this primary sample, and wake a source."""
        with self._condition:
            self._served = max(self._served, sequence)
            self._condition.notify_all()

    def wait_until_served(self, timeout: Optional[float] = None) -> bool:
        """Block a lock-step producer until every primary sample pushed so far is served."""
        with self._condition:
            return self._condition.wait_for(
                lambda: self._closed or self._served >= self._sequence, timeout)

    @property
    def closed(self) -> bool:
        """Return True once close() was called."""
        return self._closed

    def close(self) -> None:
        """Wake every waiter for good (shutdown)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    @property
    def grid(self) -> bool:
        """Return True when replies follow SITL's frame grid rather than the samples."""
        return self.settings.pacing == GRID
