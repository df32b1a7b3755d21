"""
Time checks: advancing stamps, rates that follow the motion, one clock for all.

Stamps must advance; IMU and odometry must be stamped on one clock, without an offset, and
on the clock the bridge runs on.

SITL needs one physics time for every sample. The bridge interpolates IMU and odometry onto
SITL's frame grid, so a rate is too low only when the signal changes faster than its samples
follow; that is measured (the error of interpolating each sample from its neighbours), not
guessed from the rate alone.
"""

import math
from typing import Optional, Sequence, Tuple

import numpy as np

from ardupilot_json_bridge.checks.kinematics import (
    interval_means, Motion, relative_rotations, rms, rotation_vectors, rotations_about)
from ardupilot_json_bridge.checks.verdicts import Check, OK, UNDECIDED, WRONG

# What SITL asks for by default: frames per second, and ArduCopter's loop rate (Hz).
SITL_FRAME_RATE = 1200.0
VEHICLE_LOOP_RATE = 400.0
# Interpolation errors (RMS) between samples beyond which the rate is too low for the motion.
MAX_GYRO_INTERPOLATION = 0.05
MAX_ATTITUDE_INTERPOLATION = 0.5
MAX_POSITION_INTERPOLATION = 0.05
# Steps within this fraction of the median step are regular; the rate is judged on samples
# between two regular steps, when there are at least so many, and so large a share of all.
REGULAR = 0.25
MIN_REGULAR = 20
MIN_REGULAR_SHARE = 0.5
# Stretches (s) whose interpolation errors are compared, and the samples one needs to count.
SEGMENT = 0.5
MIN_SEGMENT_SAMPLES = 5
# IMU-to-odometry offsets searched (s), the coarse and fine steps (s), the odometry
# intervals compared (s, at most how many; turning at most MAX_INTERVAL_TURN rad), and the
# fit needed to decide.
MAX_OFFSET = 0.25
COARSE_STEP = 0.01
FINE_STEP = 0.001
OFFSET_INTERVAL = 0.02
MAX_INTERVAL_TURN = 1.0
OFFSET_STEPS = 500
OFFSET_FIT = 0.3
# Stamps further than this from the clock (s) are on another clock altogether.
OTHER_CLOCK = 1000.0
# Later than this (s) behind the clock, or ahead of it, stamps are not the samples' time.
MAX_LAG = 1.0
MAX_LEAD = 0.5
# Epoch seconds above this are wall-clock time (2001); simulated time starts near zero.
WALL_CLOCK_EPOCH = 1e9


def stamps_check(name: str, stamps: np.ndarray) -> Check:
    """Judge stamps in arrival order: advancing, never repeated or going back."""
    steps = np.diff(stamps)
    back, repeated = int(np.sum(steps < 0)), int(np.sum(steps == 0))
    span = float(np.max(stamps) - np.min(stamps))
    rate = (len(np.unique(stamps)) - 1) / span if span > 0 else 0.0
    measured = f'{rate:.0f} Hz, {back} step(s) back, {repeated} repeated'
    if back or repeated or span <= 0:
        return Check(f'time: {name} stamps', WRONG, measured,
                     'stamp each message with the physics time it describes, advancing')
    return Check(f'time: {name} stamps', OK, measured)


def median_rate(stamps: np.ndarray) -> float:
    """Return samples per second from the median step of sorted stamps."""
    step = float(np.median(np.diff(stamps)))
    return 1.0 / step if step > 0 else 0.0


def needed_rate(rate: float, error: float, limit: float) -> float:
    """Return the rate at which an interpolation error (second order in the step) meets limit."""
    rate = rate * math.sqrt(error / limit)
    step = 10.0 if rate < 100.0 else 50.0
    return step * math.ceil(rate / step)


def midpoint_errors(values: np.ndarray) -> np.ndarray:
    """
    Return, per inner sample, the error of interpolating it from its two neighbours, / 4.

    Linear interpolation errs by a quarter of that between adjacent samples (second order).
    """
    return (0.5 * (values[2:] + values[:-2]) - values[1:-1]) / 4.0


def regular_triples(stamps: np.ndarray) -> np.ndarray:
    """Return which inner samples sit between two steps within REGULAR of the median step."""
    steps = np.diff(stamps)
    median = float(np.median(steps))
    regular = np.abs(steps - median) <= REGULAR * median
    return regular[:-1] & regular[1:]


def typical_error(stamps: np.ndarray, errors: np.ndarray) -> float:
    """
    Return the median over SEGMENT-long stretches of the RMS of errors (n, k) at stamps.

    A fault of the rate lasts the whole window; a landing's jolt or a burst of noise is one
    stretch, which the median leaves out.
    """
    if len(errors) == 0:
        return 0.0
    segments = np.floor((stamps - stamps[0]) / SEGMENT).astype(int)
    values = [rms(errors[segments == k]) for k in np.unique(segments)
              if np.sum(segments == k) >= MIN_SEGMENT_SAMPLES]
    return float(np.median(values)) if values else rms(errors)


def sampling(name: str, stamps: np.ndarray) -> Tuple[Optional[np.ndarray], str]:
    """
    Return the mask of regular inner samples and a note of the gaps, or None when too few.

    A loaded machine skips frames and steps unevenly; the rate is judged where it did not.
    """
    regular = regular_triples(stamps)
    share = float(np.mean(regular)) if len(regular) else 0.0
    steps = np.diff(stamps)
    note = ('' if share > 0.99 else
            f'; {1 - share:.0%} of the samples between uneven steps (longest '
            f'{float(np.max(steps)) * 1e3:.0f} ms) left out')
    if np.sum(regular) < MIN_REGULAR or share < MIN_REGULAR_SHARE:
        return None, (f'{name} stamps too uneven to judge the rate: {share:.0%} of the '
                      f'samples between steps within {REGULAR:.0%} of the median '
                      f'{float(np.median(steps)) * 1e3:.2f} ms (frames skipped or a starved '
                      'simulator?)')
    return regular, note


def imu_rate_check(stamps: np.ndarray, gyro: np.ndarray) -> Check:
    """Judge whether the IMU's rate follows its gyro (rad/s), against SITL's rates."""
    rate = median_rate(stamps)
    regular, note = sampling('IMU', stamps)
    if regular is None:
        return Check('time: imu rate', UNDECIDED, note)
    error = typical_error(stamps[1:-1][regular], midpoint_errors(gyro)[regular])
    measured = (f"{rate:.4g} Hz against SITL's {SITL_FRAME_RATE:.0f} frames/s and "
                f'{VEHICLE_LOOP_RATE:.0f} Hz loop; the gyro interpolates between samples to '
                f'{error:.3f} rad/s RMS{note}')
    if error > MAX_GYRO_INTERPOLATION:
        needed = needed_rate(rate, error, MAX_GYRO_INTERPOLATION)
        return Check('time: imu rate', WRONG, measured,
                     f'publish the IMU at {needed:.0f} Hz or more: the motion is faster than '
                     f'{rate:.4g} Hz samples follow')
    return Check('time: imu rate', OK, measured)


def odometry_rate_check(motion: Motion) -> Check:
    """Judge whether the odometry's rate follows its attitude and position."""
    rate = median_rate(motion.stamps)
    rotations = motion.rotations
    if len(rotations) < 3:
        return Check('time: odometry rate', UNDECIDED, f'{len(rotations)} samples')
    regular, note = sampling('odometry', motion.stamps)
    if regular is None:
        return Check('time: odometry rate', UNDECIDED, note)
    halves = rotation_vectors(relative_rotations(rotations[:-2], rotations[2:])) / 2.0
    midpoints = rotations[:-2] @ rotations_about(halves)
    inner = motion.stamps[1:-1][regular]
    attitude = math.degrees(typical_error(inner, rotation_vectors(relative_rotations(
        midpoints, rotations[1:-1]))[regular] / 4.0))
    position = typical_error(inner, midpoint_errors(motion.position)[regular])
    measured = (f'{rate:.4g} Hz; interpolating between samples errs by {attitude:.3f} deg of '
                f'attitude and {position:.3f} m RMS{note}')
    if attitude > MAX_ATTITUDE_INTERPOLATION or position > MAX_POSITION_INTERPOLATION:
        needed = max(needed_rate(rate, attitude, MAX_ATTITUDE_INTERPOLATION),
                     needed_rate(rate, position, MAX_POSITION_INTERPOLATION))
        return Check('time: odometry rate', WRONG, measured,
                     f'publish odometry at {needed:.0f} Hz or more')
    return Check('time: odometry rate', OK, measured)


def offset_intervals(motion: Motion) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    Return (starts, ends, mean body rates) of odometry intervals of about OFFSET_INTERVAL.

    Intervals of many IMU samples: one of a sample or two would keep the noise of the
    samples it happens to cover, which favours lags that line the grids up.
    """
    rate = median_rate(motion.stamps)
    span = max(1, int(round(OFFSET_INTERVAL * rate)))
    # A turn of half a revolution or more within an interval reads as a smaller one: a
    # spinning vehicle gets shorter intervals.
    fastest = float(np.max(np.linalg.norm(motion.body_rates(motion.orientation), axis=1)))
    if fastest * span / rate > MAX_INTERVAL_TURN:
        span = max(1, int(MAX_INTERVAL_TURN * rate / fastest))
    first = np.arange(0, len(motion.stamps) - span)
    first = first[::max(1, len(first) // OFFSET_STEPS)]
    last = first + span
    turns = rotation_vectors(relative_rotations(motion.rotations[first],
                                                motion.rotations[last]))
    starts, ends = motion.stamps[first], motion.stamps[last]
    return starts, ends, turns / (ends - starts)[:, None]


def offset_residuals(imu_stamps: np.ndarray, gyro: np.ndarray,
                     intervals: Tuple[np.ndarray, np.ndarray, np.ndarray],
                     lags: np.ndarray) -> np.ndarray:
    """Return the RMS of the gyro's mean over each interval, lag s later, minus its rate."""
    starts, ends, rates = intervals
    inside = (starts + lags.min() >= imu_stamps[0]) & (ends + lags.max() <= imu_stamps[-1])
    starts, ends, rates = starts[inside], ends[inside], rates[inside]
    means = interval_means(imu_stamps, gyro, (starts[None, :] + lags[:, None]).ravel(),
                           (ends[None, :] + lags[:, None]).ravel())
    errors = (means.reshape(len(lags), len(starts), 3) - rates[None]) ** 2
    return np.sqrt(errors.sum(axis=2).mean(axis=1))


def offset_check(imu_stamps: np.ndarray, gyro: Optional[np.ndarray], motion: Motion,
                 rotation: float) -> Check:
    """
    Find the time offset between IMU and odometry by sliding the gyro along the attitude rates.

    gyro is in rad/s in the body frame (mounting applied), None when no mounting fits. A
    coarse search over +-MAX_OFFSET, then a fine one around its best, then a parabola.
    """
    name = 'time: imu to odometry'
    if gyro is None:
        return Check(name, UNDECIDED, 'needs rotation that the gyro and the attitude agree on')
    if imu_stamps[-1] - imu_stamps[0] < 4 * MAX_OFFSET:
        return Check(name, UNDECIDED, 'needs a longer window')
    intervals = offset_intervals(motion)
    coarse = np.arange(-MAX_OFFSET, MAX_OFFSET + COARSE_STEP / 2, COARSE_STEP)
    best = int(np.argmin(offset_residuals(imu_stamps, gyro, intervals, coarse)))
    if best in (0, len(coarse) - 1):
        return Check(name, UNDECIDED, f'best fit at the edge of +-{MAX_OFFSET * 1e3:.0f} ms')
    fine = coarse[best] + np.arange(-COARSE_STEP, COARSE_STEP + FINE_STEP / 2, FINE_STEP)
    residuals = offset_residuals(imu_stamps, gyro, intervals, fine)
    best = min(max(int(np.argmin(residuals)), 1), len(fine) - 2)
    # The mean square is a parabola in the lag (the RMS a hyperbola): its vertex is unbiased.
    offset = fine[best] + parabola_vertex(residuals[best - 1:best + 2] ** 2) * FINE_STEP
    fit = float(residuals[best]) / rotation
    step = 1.0 / min(median_rate(imu_stamps), median_rate(motion.stamps))
    measured = (f'the gyro matches the attitude rates best {abs(offset) * 1e3:.1f} ms '
                f'{"earlier" if offset < 0 else "later"} (fit {fit:.1%}, sample step '
                f'{step * 1e3:.1f} ms)')
    if fit > OFFSET_FIT:
        return Check(name, UNDECIDED, measured + ': no offset fits')
    if abs(offset) > max(0.005, 0.5 * step):
        later = 'odometry' if offset < 0 else 'IMU'
        return Check(name, WRONG, measured,
                     f'stamp IMU and odometry with the physics time of each sample: the '
                     f'{later} stamps are {abs(offset) * 1e3:.0f} ms late')
    return Check(name, OK, measured)


def parabola_vertex(values: Sequence[float]) -> float:
    """Return where a parabola through three equally spaced values has its vertex, in steps."""
    before, middle, after = values
    curvature = before - 2.0 * middle + after
    return 0.0 if curvature <= 0 else 0.5 * (before - after) / curvature


def clock_check(pairs: np.ndarray) -> Check:
    """Judge (message stamp, clock on receipt) pairs: are stamps on the bridge's clock."""
    name = 'time: stamps against the clock'
    if len(pairs) == 0:
        return Check(name, UNDECIDED, "no clock readings: the node's clock or a bag's /clock")
    stamp, clock = (float(v) for v in np.median(pairs, axis=0))
    lag = float(np.median(pairs[:, 1] - pairs[:, 0]))
    measured = f'stamps {stamp:.3f} s, clock {clock:.3f} s on receipt (median)'
    if abs(lag) > OTHER_CLOCK:
        return Check(name, WRONG, measured, other_clock_fix(stamp, clock))
    if lag > MAX_LAG:
        return Check(name, WRONG, measured + f': {lag:.2f} s late',
                     'stamp each message with the time of its sample, not a queued or '
                     'delayed time')
    if lag < -MAX_LEAD:
        return Check(name, WRONG, measured + f': {-lag:.2f} s ahead of the clock',
                     'stamp with the clock the simulator publishes on /clock')
    return Check(name, OK, measured + f': {lag * 1e3:.1f} ms behind')


def other_clock_fix(stamp: float, clock: float) -> str:
    """Return the fix for stamps on another clock than the bridge's, by which is the wall."""
    if stamp > WALL_CLOCK_EPOCH > clock:
        return ('the stamps are wall-clock time while the clock is simulated: stamp with the '
                'simulation time, or run without use_sim_time')
    if clock > WALL_CLOCK_EPOCH > stamp:
        return ('the stamps are simulated time while the clock is the wall: set '
                "use_sim_time: true and bridge the simulator's /clock")
    return 'stamp with the clock the simulator publishes on /clock'
