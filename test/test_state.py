"""The state: instants from histories, both pacings, staleness, optional inputs, bad stamps."""

from dataclasses import replace
import logging
import math
import threading
from typing import Callable, Optional, Tuple

import pytest

from ardupilot_json_bridge.core.alignment import History, imu_from_odometry
from ardupilot_json_bridge.core.clocks import SAME_INSTANT
from ardupilot_json_bridge.core.frames import quaternion_to_euler
from ardupilot_json_bridge.core.reply import build_reply, windvane
from ardupilot_json_bridge.core.samples import ImuSample, OdometrySample, Stamped
from ardupilot_json_bridge.core.settings import SAMPLES, StateSettings
from ardupilot_json_bridge.core.state import Instant, SensorState, STARTUP_GRACE, Unavailable

LEVEL = (1.0, 0.0, 0.0, 0.0)
REST_ACCEL = (0.0, 0.0, -9.80665)
LOCK_STEP = StateSettings(pacing=SAMPLES)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def odometry(stamp, position=(0.0, 0.0, 0.0), velocity=(0.0, 0.0, 0.0), quaternion=LEVEL,
             gyro=(0.0, 0.0, 0.0)):
    return OdometrySample(stamp, position, velocity, quaternion, gyro)


def imu(stamp, gyro=(0.0, 0.0, 0.0), accel=REST_ACCEL):
    return ImuSample(stamp, gyro, accel)


def test_no_data_is_unavailable_naming_the_input():
    state = SensorState(StateSettings())
    result = state.wait_for_stamp(1.0, 0.0)
    assert isinstance(result, Unavailable) and result.input == 'imu'
    state.push_imu(imu(1.0))
    result = state.wait_for_stamp(1.0, 0.0)
    assert isinstance(result, Unavailable) and result.input == 'odometry'
    assert 'no message' in str(result)


@pytest.mark.parametrize('asked', ['stamp', 'sample'])
@pytest.mark.parametrize('published', [(), ('imu',)])
@pytest.mark.parametrize('idle', [0.5, 100.0])
def test_an_input_never_received_is_told_at_info_while_starting_then_as_a_warning(
        asked: str, published: Tuple[str, ...], idle: float) -> None:
    """
    A simulator may publish after SITL's first frames; later, its silence is a fault.

    The grace counts from the first frame that finds the input missing, however long the
    bridge waited for SITL (idle s) before it.
    """
    clock = FakeClock()
    state = SensorState(StateSettings(), clock=clock)
    clock.now += idle
    if 'imu' in published:
        state.push_imu(imu(1.0))
    missing = 'odometry' if published else 'imu'

    def ask() -> Unavailable:
        result = (state.wait_for_stamp(1.0, 0.0) if asked == 'stamp'
                  else state.wait_for_sample(0, 0.0))
        assert isinstance(result, Unavailable) and result.input == missing
        assert 'no message received yet' in str(result)
        return result

    first = clock.now
    starting = ask()
    assert starting.level == logging.INFO and 'starting up' in str(starting)
    clock.now = first + STARTUP_GRACE - 0.01
    assert ask().level == logging.INFO
    clock.now = first + STARTUP_GRACE
    late = ask()
    assert late.level == logging.WARNING and 'starting up' not in str(late)
    # /diagnostics counts the frames left unanswered for the input: not those of the start.
    state.count_unanswered(starting)
    assert state.meters[missing].unanswered == 0
    state.count_unanswered(late)
    assert state.meters[missing].unanswered == 1 and state.meters[missing].fault == late.reason


def test_odometry_is_carried_forward_to_the_instant():
    state = SensorState(StateSettings())
    state.push_odometry(odometry(10.0, position=(1.0, 2.0, -3.0), velocity=(2.0, -1.0, 0.5)))
    state.push_imu(imu(10.0, gyro=(0.0, 0.0, 0.5)))
    state.push_imu(imu(10.02, gyro=(0.0, 0.0, 0.5)))
    instant = state.wait_for_stamp(10.02, 0.0)
    assert isinstance(instant, Instant) and instant.stamp == 10.02
    reply = build_reply(instant, 0.25)
    assert reply.timestamp == 0.25
    assert reply.position == pytest.approx((1.04, 1.98, -2.99))
    assert reply.velocity == (2.0, -1.0, 0.5)
    assert quaternion_to_euler(reply.quaternion)[2] == pytest.approx(0.5 * 0.02)
    assert reply.accel_body == REST_ACCEL and reply.gyro == (0.0, 0.0, 0.5)


def test_odometry_newer_than_the_instant_is_carried_back():
    # Odometry stamped after the instant (negative dt): yaw goes back by rate x 0.02 s.
    state = SensorState(StateSettings())
    state.push_imu(imu(9.98, gyro=(0.0, 0.0, 0.5)))
    state.push_imu(imu(10.0, gyro=(0.0, 0.0, 0.5)))
    state.push_odometry(odometry(10.0, position=(1.0, 0.0, 0.0), velocity=(2.0, 0.0, 0.0)))
    reply = build_reply(state.wait_for_stamp(9.98, 0.0), 0.0)
    assert quaternion_to_euler(reply.quaternion)[2] == pytest.approx(-0.5 * 0.02)
    assert reply.position == pytest.approx((1.0 - 2.0 * 0.02, 0.0, 0.0))


def test_between_close_odometry_samples_values_are_interpolated():
    state = SensorState(StateSettings())
    yaw_0 = (math.cos(0.05), 0.0, 0.0, math.sin(0.05))
    yaw_1 = (math.cos(0.1), 0.0, 0.0, math.sin(0.1))
    state.push_odometry(odometry(1.0, position=(0.0, 0.0, -1.0), velocity=(1.0, 0.0, 0.0),
                                 quaternion=yaw_0))
    state.push_odometry(odometry(1.01, position=(0.01, 0.0, -1.0), velocity=(3.0, 0.0, 0.0),
                                 quaternion=yaw_1))
    state.push_imu(imu(1.0, gyro=(0.0, 0.0, 1.0), accel=(0.0, 0.0, -9.0)))
    state.push_imu(imu(1.01, gyro=(0.0, 0.0, 3.0), accel=(0.0, 0.0, -11.0)))
    instant = state.wait_for_stamp(1.0075, 0.0)
    assert instant.position == pytest.approx((0.0075, 0.0, -1.0))
    assert instant.velocity == pytest.approx((2.5, 0.0, 0.0))
    # Yaw 0.1 to 0.2 rad, three quarters of the way; rates and specific force likewise.
    assert quaternion_to_euler(instant.quaternion)[2] == pytest.approx(0.175)
    assert instant.gyro == pytest.approx((0.0, 0.0, 2.5))
    assert instant.accel == pytest.approx((0.0, 0.0, -10.5))


def test_stale_odometry_is_unavailable_with_its_lag():
    state = SensorState(StateSettings(max_odometry_lag=0.1))
    state.push_odometry(odometry(10.0))
    state.push_imu(imu(10.3))
    result = state.wait_for_stamp(10.3, 0.0)
    assert isinstance(result, Unavailable) and result.input == 'odometry'
    assert '0.300 s from the instant' in result.reason


def test_an_instant_past_the_samples_waits_unless_within_the_horizon():
    state = SensorState(StateSettings())
    state.push_odometry(odometry(1.0))
    state.push_imu(imu(1.0))
    result = state.wait_for_stamp(1.004, 0.0)
    assert isinstance(result, Unavailable) and '0.0040 s short' in result.reason
    ahead = SensorState(StateSettings(horizon=0.005))
    ahead.push_odometry(odometry(1.0, velocity=(1.0, 0.0, 0.0)))
    ahead.push_imu(imu(1.0))
    assert ahead.wait_for_stamp(1.004, 0.0).position == pytest.approx((0.004, 0.0, 0.0))


def test_a_sample_a_rounding_short_of_the_instant_is_at_it():
    # mujoco_sim at 10.005 s, stamped in nanoseconds, reads back as 10.004999999999999; SITL's
    # grid computes the frame's instant as 10.005000000000001. One instant, not a step short.
    state = SensorState(StateSettings())
    state.push_odometry(odometry(10.0, velocity=(1.0, 0.0, 0.0)))
    state.push_imu(imu(10.004999999999999))
    instant = state.wait_for_stamp(10.005000000000001, 0.0)
    assert isinstance(instant, Instant) and instant.stamp == 10.005000000000001
    assert instant.position == pytest.approx((0.005, 0.0, 0.0))
    # A microsecond and more short is a sample before the instant: it waits for the next.
    result = state.wait_for_stamp(10.004999999999999 + 2 * SAME_INSTANT, 0.0)
    assert isinstance(result, Unavailable) and 'short of the instant' in result.reason


def test_first_reply_starts_at_the_newest_sample():
    state = SensorState(LOCK_STEP)
    state.push_odometry(odometry(1.0))
    for i in range(100):
        state.push_imu(imu(1.0 + i * 0.001))
    instant = state.wait_for_sample(0, 0.0)
    assert (instant.stamp, instant.skipped) == (pytest.approx(1.099), 0)


def test_lock_step_replies_advance_one_sample_at_a_time():
    state = SensorState(LOCK_STEP)
    state.push_odometry(odometry(1.0))
    state.push_imu(imu(0.999))
    first = state.wait_for_sample(0, 0.0)
    for i in range(5):
        state.push_imu(imu(1.0 + i * 0.001))
    stamps, after = [], first.sequence
    for _ in range(5):
        instant = state.wait_for_sample(after, 0.0)
        stamps.append(instant.stamp)
        after = instant.sequence
    assert stamps == pytest.approx([1.0, 1.001, 1.002, 1.003, 1.004])
    assert isinstance(state.wait_for_sample(after, 0.0), Unavailable)


def test_lock_step_backlog_beyond_limit_skips_to_newest():
    state = SensorState(StateSettings(max_backlog=0.05, pacing=SAMPLES))
    state.push_odometry(odometry(1.0))
    state.push_imu(imu(0.999))
    first = state.wait_for_sample(0, 0.0)
    for i in range(100):
        state.push_imu(imu(1.0 + i * 0.001))
    instant = state.wait_for_sample(first.sequence, 0.0)
    assert instant.stamp == pytest.approx(1.099)
    assert instant.skipped == 99


def test_wait_wakes_on_a_new_sample():
    state = SensorState(StateSettings())
    state.push_odometry(odometry(1.0))
    timer = threading.Timer(0.05, lambda: state.push_imu(imu(1.0)))
    timer.start()
    result = state.wait_for_stamp(1.0, 5.0)
    timer.join()
    assert isinstance(result, Instant)


def test_wait_times_out_and_close_wakes_waiters():
    clock = FakeClock()
    state = SensorState(LOCK_STEP, clock=clock)
    state.push_odometry(odometry(1.0))
    state.push_imu(imu(1.0))
    clock.now += 2.0
    result = state.wait_for_sample(1, 0.0)
    assert isinstance(result, Unavailable) and 'for 2.00 s' in result.reason
    assert 'for 2.00 s' in state.wait_for_stamp(1.1, 0.0).reason
    state.close()
    assert isinstance(state.wait_for_sample(1, 60.0), Unavailable)
    assert isinstance(state.wait_for_stamp(2.0, 60.0), Unavailable)
    assert state.wait_until_served(60.0)


def test_optional_inputs_fresh_and_stale():
    state = SensorState(StateSettings(max_optional_age=0.5, rangefinder_count=2))
    state.push_odometry(odometry(10.0))
    state.push_range(0, Stamped(9.9, 4.0))
    state.push_range(1, Stamped(9.0, 5.0))
    state.push_airspeed(Stamped(10.0, 12.0))
    state.push_battery(Stamped(10.0, (12.5, 3.0)))
    state.push_rc(Stamped(10.0, (1500.0, 1600.0)))
    state.push_wind(Stamped(10.0, (0.0, 5.0, 0.0)))
    state.push_imu(imu(10.0))
    reply = build_reply(state.wait_for_stamp(10.0, 0.0), 0.0)
    assert reply.rangefinders == (4.0, None)
    assert state.meters['rangefinder_2'].left_out == 1
    assert reply.airspeed == 12.0 and reply.battery == (12.5, 3.0)
    assert reply.rc == (1500.0, 1600.0)
    assert reply.velocity_wind == (0.0, 5.0, 0.0)
    # Air moving east past a north-facing vehicle at rest comes from its left: -90 deg.
    assert reply.windvane == pytest.approx((-math.pi / 2, 5.0))
    with pytest.raises(IndexError):
        state.push_range(2, Stamped(10.0, 1.0))


def test_windvane_head_wind():
    direction, speed = windvane((0.0, 0.0, 0.0), (10.0, 0.0, 0.0), LEVEL)
    assert (direction, speed) == pytest.approx((0.0, 10.0))


def test_odometry_only_derives_specific_force_and_gyro():
    state = SensorState(StateSettings(odometry_only=True))
    state.push_imu(imu(5.0, gyro=(9.0, 9.0, 9.0)))
    state.push_odometry(odometry(1.0, velocity=(0.0, 0.0, 0.0), gyro=(0.0, 0.0, 0.2)))
    state.push_odometry(odometry(1.02, velocity=(0.2, 0.0, 0.0), gyro=(0.0, 0.0, 0.2)))
    instant = state.wait_for_stamp(1.02, 0.0)
    assert instant.gyro == (0.0, 0.0, 0.2)
    assert instant.accel == pytest.approx((10.0, 0.0, -9.80665))


def test_odometry_only_level_at_rest():
    sample = imu_from_odometry(History(1.0), odometry(0.0))
    assert sample.accel == pytest.approx(REST_ACCEL)


@pytest.mark.parametrize('jitter', [1e-6, 1e-4, 1e-3])
def test_odometry_only_stamp_jitter_makes_no_acceleration_spike(jitter):
    # A vehicle accelerating north at 2 m/s^2, odometry every 4 ms, each stamp shaken.
    history = History(1.0)
    worst = 0.0
    for i in range(50):
        nominal = 1.0 + 0.004 * i
        stamp = nominal + (jitter if i % 2 else -jitter)
        sample = odometry(stamp, velocity=(2.0 * (nominal - 1.0), 0.0, 0.0))
        derived = imu_from_odometry(history, sample)
        history.append(stamp, sample)
        if i > 2:
            worst = max(worst, abs(derived.accel[0] - 2.0))
    # Two samples 1 us apart once gave 10 000 m/s^2; now the error stays below the jitter's
    # share of a difference over at least 4 ms.
    assert worst < 2.0 * 2 * jitter / 0.004 + 0.5


def test_repeated_and_late_stamps_are_dropped_counted_and_named(caplog):
    state = SensorState(LOCK_STEP, logger=logging.getLogger('test.state'))
    state.push_odometry(odometry(1.0))
    with caplog.at_level(logging.WARNING, logger='test.state'):
        state.push_imu(imu(1.0))
        state.push_imu(imu(1.001))
        state.push_imu(imu(1.001))
        state.push_imu(imu(1.0005))
        state.push_imu(imu(1.002))
    assert state.meters['imu'].out_of_order == 2
    assert 'repeats the stamp' in caplog.text
    # Only new physics is served, in order, and a lock-step source is never left waiting.
    first = state.wait_for_sample(0, 0.0)
    state.mark_served(first.sequence)
    assert first.stamp == 1.002 and state.wait_until_served(0.0)


def test_a_stamp_far_behind_is_a_simulation_reset():
    state = SensorState(StateSettings())
    state.push_odometry(odometry(100.0))
    state.push_imu(imu(100.0))
    state.push_imu(imu(0.001))
    state.push_odometry(odometry(0.0))
    assert state.resets == 1
    assert state.wait_for_stamp(0.001, 0.0).stamp == 0.001


def test_meters_count_and_rate():
    clock = FakeClock()
    state = SensorState(StateSettings(), clock=clock)
    for i in range(11):
        state.push_imu(imu(1.0 + i * 0.01))
        clock.now += 0.01
    meter = state.meters['imu']
    assert meter.count == 11
    assert meter.rate() == pytest.approx(100.0)
    assert meter.age(clock.now) == pytest.approx(0.01)
    state.count_rejected('odometry')
    assert state.meters['odometry'].rejected == 1


@pytest.mark.parametrize('clock_name, odometry_start', [
    ('simulated time', 1100.0),             # 1000 s off: another simulated clock
    ('simulated time', 101.5),              # 1.5 s off: more than any input lags
    ('wall-clock time', None)])             # stamped with the wall clock (time.time())
def test_odometry_on_another_clock_is_refused_without_carrying_and_named(
        monkeypatch, clock_name, odometry_start):
    import time
    from ardupilot_json_bridge.core import alignment
    steps = []
    turn = alignment.propagate_attitude

    def counted(*arguments):
        steps.append(1)
        assert len(steps) < 1000, 'carried the odometry over 500 steps to decide one frame'
        return turn(*arguments)
    monkeypatch.setattr(alignment, 'propagate_attitude', counted)
    start = time.time() if odometry_start is None else odometry_start
    clock = FakeClock()
    state = SensorState(StateSettings(), clock=clock)
    for i in range(5):
        state.push_imu(imu(100.0 + 0.004 * i))
        state.push_odometry(odometry(start + 0.004 * i))
        clock.now += 0.004
    result = state.wait_for_stamp(100.016, 0.0)
    assert not steps
    assert isinstance(result, Unavailable) and result.input == 'odometry'
    assert result.level == logging.ERROR
    text = result.reason
    # Both clocks with their stamps, the offset, and the fix.
    assert f'odometry {start + 0.016:.3f} s: {clock_name}' in text, text
    assert 'IMU 100.016 s: simulated time' in text, text
    assert f'{start - 100.0:.3f} s ahead of the IMU' in text, text
    assert 'use_sim_time:=true' in text and 'stamp both with the physics time' in text, text
    # Back on the IMU's clock: the very next instant is answered.
    state.push_odometry(odometry(100.018))
    state.push_imu(imu(100.020))
    assert isinstance(state.wait_for_stamp(100.020, 0.0), Instant)


def test_odometry_late_on_the_same_clock_is_a_warning_not_another_clock():
    # One simulated clock; odometry at 20 Hz, stamped 0.3 s behind the IMU, still arriving.
    clock = FakeClock()
    state = SensorState(StateSettings(), clock=clock)
    for i in range(1000):
        stamp = 100.0 + i * 0.001
        state.push_imu(imu(stamp))
        if i % 50 == 0:
            state.push_odometry(odometry(stamp - 0.3))
        clock.now += 0.001
    result = state.wait_for_stamp(100.999, 0.0)
    # Newest odometry: i = 950, 100.950 - 0.3 = 100.650; 100.999 - 100.650 = 0.349 s.
    assert isinstance(result, Unavailable) and result.input == 'odometry'
    assert result.level == logging.WARNING, result.reason
    assert 'odometry lags the IMU by 0.349 s: published too rarely or stamped late' in \
        result.reason, result.reason
    assert 'clock' not in result.reason, result.reason


def test_lock_step_waits_for_odometry_published_after_the_imu_sample():
    # Odometry at ~3 Hz on the IMU's clock; the one for 1.050 s comes 50 ms after its IMU.
    state = SensorState(LOCK_STEP)
    for i in range(701):
        state.push_imu(imu(i * 0.001))
        if i % 350 == 0:
            state.push_odometry(odometry(i * 0.001))
    first = state.wait_for_sample(0, 1.0)
    assert isinstance(first, Instant) and first.stamp == pytest.approx(0.7)
    for i in range(701, 1051):
        state.push_imu(imu(i * 0.001))
    late = threading.Timer(0.05, lambda: state.push_odometry(odometry(1.050)))
    late.start()
    result = state.wait_for_sample(first.sequence + 349, 10.0)
    late.join()
    assert isinstance(result, Instant), result
    assert result.stamp == pytest.approx(1.050)


def test_odometry_that_stopped_is_not_blamed_on_clocks():
    clock = FakeClock()
    state = SensorState(StateSettings(max_odometry_lag=0.1), clock=clock)
    state.push_odometry(odometry(10.0))
    clock.now += 3.0
    state.push_imu(imu(13.0))
    result = state.wait_for_stamp(13.0, 0.0)
    assert isinstance(result, Unavailable) and result.level == logging.WARNING
    assert '3.000 s from the instant' in result.reason
    assert 'none received for 3.00 s' in result.reason and 'clock' not in result.reason


def test_histories_grow_with_a_backlog_raised_while_running():
    # SITL 1.5 s behind the newest samples, max_backlog 2 s: served when 2 s was given at
    # start, and must be when it was raised later (ros2 param set).
    def instant_behind(state: SensorState):
        for i in range(2000):
            if i % 4 == 0:
                state.push_odometry(odometry(100.0 + i * 0.001))
            state.push_imu(imu(100.0 + i * 0.001))
        return state.wait_for_stamp(100.5, 0.0)

    short = StateSettings(max_optional_age=0.1)   # keeps the histories short at start
    assert isinstance(instant_behind(SensorState(replace(short, max_backlog=2.0))), Instant)
    raised = SensorState(short)
    raised.settings = replace(short, max_backlog=2.0)
    result = instant_behind(raised)
    assert isinstance(result, Instant), result
    lag = SensorState(short)
    lag.settings = replace(short, max_odometry_lag=3.0)
    assert isinstance(instant_behind(lag), Instant)


def test_two_clocks_are_told_from_a_simulation_restarting():
    state = SensorState(StateSettings())
    for stamp in (5.0, 5.001, 0.0, 0.001):        # a restart (looping bag): back only
        state.push_imu(imu(stamp))
    assert state.resets == 1 and state.two_clocks is None
    for stamp in (50.0, 0.002, 50.001):           # forward 50 s, back 50 s: two clocks
        state.push_imu(imu(stamp))
    assert state.two_clocks == (50.0, 0.002)
    for stamp in (48.0, 46.0):                    # then restarts without a jump forward
        state.push_imu(imu(stamp))
    assert state.resets == 4 and state.two_clocks is None


def test_a_clock_jump_back_under_a_second_is_a_reset_after_five_late_samples():
    history = History(keep=2.0)
    for i in range(801):
        assert history.append(i * 0.001, i) == 'added'
    # Restarted 0.5 s back (less than RESET_JUMP): four samples dropped, the fifth restarts.
    outcomes = [history.append(0.3 + i * 0.001, -i) for i in range(5)]
    assert outcomes == ['late', 'late', 'late', 'late', 'reset']
    assert history.stamps == [pytest.approx(0.304)]
    assert history.append(0.305, -5) == 'added'


def test_late_samples_out_of_order_or_few_are_no_reset():
    history = History(keep=2.0)
    for i in range(10):
        history.append(1.0 + i * 0.01, i)
    # Four delivered late in order, then the newest clock resumes: no reset.
    assert [history.append(s, 0) for s in (1.01, 1.02, 1.03, 1.04)] == ['late'] * 4
    assert history.append(1.10, 10) == 'added'
    # Six late ones that do not go forward among themselves: no clock of their own.
    assert [history.append(s, 0) for s in (1.05, 1.04, 1.03, 1.02, 1.01, 1.0)] == ['late'] * 6
    assert history.newest_stamp == 1.10


def test_the_state_serves_the_new_clock_after_a_small_jump_back():
    state = SensorState(StateSettings())
    for i in range(801):
        state.push_imu(imu(i * 0.001))
        state.push_odometry(odometry(i * 0.001))
    turning = (0.1, 0.0, 0.0)
    for i in range(1, 801):                 # restarted at 0.001 s, now turning
        state.push_imu(imu(i * 0.001, gyro=turning))
        state.push_odometry(odometry(i * 0.001, gyro=turning))
    assert state.resets == 1
    assert state.meters['imu'].out_of_order == 4
    result = state.wait_for_stamp(0.5, 0.0)
    assert isinstance(result, Instant) and result.gyro == pytest.approx(turning)


class CountedWaits:
    """Stands in for the state's condition wait: no wall time passes, the fake clock does."""

    def __init__(self, clock: FakeClock,
                 during: Optional[Callable[[], None]] = None) -> None:
        self.clock, self.during, self.count = clock, during, 0

    def __call__(self, timeout: Optional[float] = None) -> bool:
        self.count += 1
        self.clock.now += timeout
        if self.during is not None:
            self.during()
        return False


def counted_lock_step(monkeypatch: pytest.MonkeyPatch) -> Tuple[SensorState, CountedWaits]:
    """Return a lock-step state on a fake clock whose waits are counted (no wall time)."""
    clock = FakeClock()
    state = SensorState(LOCK_STEP, clock=clock)
    waits = CountedWaits(clock)
    monkeypatch.setattr(state._condition, 'wait', waits)
    return state, waits


def test_lock_step_waits_once_for_odometry_that_lags_then_decides_at_once(monkeypatch):
    # One clock: IMU at 1 kHz, odometry at 20 Hz stamped 0.3 s late (max_odometry_lag 0.25),
    # served in lock-step as replay --rate 0 does: one IMU sample per frame, 0.5 s to wait.
    state, waits = counted_lock_step(monkeypatch)
    clock = waits.clock
    after, unanswered = 0, 0
    for i in range(400):
        stamp = 100.0 + i * 0.001
        if i % 50 == 0:
            state.push_odometry(odometry(stamp - 0.3))
        state.push_imu(imu(stamp))
        clock.now += 0.001
        result = state.wait_for_sample(after, 0.5)
        if isinstance(result, Unavailable):
            assert result.input == 'odometry', result
            unanswered += 1
        after = result.sequence
    # Frame i is 0.300 + (i % 50) / 1000 s from the newest odometry: always past 0.25 s.
    assert unanswered == 400
    # One full wait established the lag; the other 399 frames were decided at once.
    assert waits.count == 1, f'{waits.count} waits of 0.5 s for 400 frames'
    # Odometry catches up: the very next frame is answered without waiting.
    state.push_odometry(odometry(100.4))
    state.push_imu(imu(100.4))
    result = state.wait_for_sample(after, 0.5)
    assert isinstance(result, Instant) and result.stamp == pytest.approx(100.4)
    assert waits.count == 1
    # Once answered, odometry that is late again is waited for (it may still come).
    state.push_imu(imu(100.7))
    waits.during = lambda: state.push_odometry(odometry(100.65))
    result = state.wait_for_sample(result.sequence, 0.5)
    assert isinstance(result, Instant) and result.stamp == pytest.approx(100.7)
    assert waits.count == 2


def test_lock_step_waits_again_once_odometry_catches_up_or_the_clock_restarts(monkeypatch):
    state, waits = counted_lock_step(monkeypatch)
    # Odometry 0.3 s behind the IMU (max_odometry_lag 0.25): one wait in vain sets the lag.
    state.push_odometry(odometry(99.7))
    state.push_imu(imu(100.0))
    assert isinstance(state.wait_for_sample(0, 0.5), Unavailable) and waits.count == 1
    # The next frame (100.5) is decided at once; then odometry catches up with it (100.5).
    state.push_imu(imu(100.5))
    assert isinstance(state.wait_for_sample(1, 0.5), Unavailable) and waits.count == 1
    state.push_odometry(odometry(100.5))
    # A frame 0.3 s past that odometry may wait again: the next odometry arrives meanwhile.
    state.push_imu(imu(100.8))
    waits.during = lambda: state.push_odometry(odometry(100.8))
    result = state.wait_for_sample(2, 0.5)
    assert isinstance(result, Instant) and result.stamp == pytest.approx(100.8)
    assert waits.count == 2
    # The lag established again, then SITL's physics restarts at 0: the new clock waits.
    waits.during = None
    state.push_imu(imu(101.2))
    result = state.wait_for_sample(result.sequence, 0.5)
    assert isinstance(result, Unavailable) and waits.count == 3
    for i in range(5):                      # four late, the fifth restarts the IMU's clock
        state.push_imu(imu(0.3 + 0.001 * i))
    assert state.resets == 1
    state.push_odometry(odometry(0.0))
    waits.during = lambda: state.push_odometry(odometry(0.304))
    result = state.wait_for_sample(result.sequence, 0.5)
    assert isinstance(result, Instant) and result.stamp < 0.31          # the new clock
    assert waits.count == 4


def test_lock_step_does_not_wait_when_newer_odometry_cannot_be_nearer(monkeypatch):
    # Odometry at 1 Hz: the sample after the instant is already there, 0.5 s away; any newer
    # one is further still, so the frame is decided at once, on the first frame too.
    state, waits = counted_lock_step(monkeypatch)
    state.push_odometry(odometry(10.0))
    state.push_odometry(odometry(11.0))
    state.push_imu(imu(10.5))
    result = state.wait_for_sample(0, 0.5)
    assert isinstance(result, Unavailable) and '0.500 s from the instant' in result.reason
    assert waits.count == 0


def test_a_frame_pushed_at_once_is_served_and_counted_as_odometry_then_imu():
    # The same frames, one with a repeated stamp, pushed both ways: the same replies, counts.
    frames = [(0.001 * k, (0.01 * k, 0.0, -0.1 * k)) for k in (1, 2, 2, 3)]
    apart, together = SensorState(LOCK_STEP), SensorState(LOCK_STEP)
    served = {id(apart): [], id(together): []}
    for stamp, position in frames:
        sample_imu = imu(stamp, gyro=(0.0, 0.02 * stamp, 0.0))
        sample_odometry = odometry(stamp, position=position, velocity=(stamp, 0.0, 0.0))
        apart.push_odometry(sample_odometry)
        apart.push_imu(sample_imu)
        together.push_frame(sample_imu, sample_odometry)
        for state in (apart, together):
            instant = state.wait_for_sample(max([0] + [i.sequence for i in served[id(state)]]),
                                            0.0)
            if isinstance(instant, Instant):
                served[id(state)].append(instant)
    assert [i.stamp for i in served[id(together)]] == [0.001, 0.002, 0.003]
    assert served[id(together)] == served[id(apart)]
    assert served[id(together)][-1].position == pytest.approx((0.03, 0.0, -0.3))
    for name in ('imu', 'odometry'):
        assert (together.meters[name].out_of_order, together.meters[name].count) == (
            apart.meters[name].out_of_order, apart.meters[name].count) == (1, 4)


def test_odometry_not_yet_looped_after_the_imu_is_no_other_clock():
    # A bag played with --loop on a busy machine: the IMU's first sample of the next pass
    # (3 s back) arrives before the odometry's. That is a moment's wait, not two clocks.
    state = SensorState(StateSettings())
    for i in range(1001):
        state.push_imu(imu(46.284 + i * 0.001))
        state.push_odometry(odometry(46.284 + i * 0.001))
    state.push_imu(imu(44.284))
    assert state.resets == 1
    result = state.wait_for_stamp(44.284, 0.0)
    assert isinstance(result, Unavailable) and result.level == logging.WARNING, result
    assert 'clock went back to 44.284 s and odometry (newest 47.284 s) has not followed' \
        in result.reason
    state.push_odometry(odometry(44.284))
    assert isinstance(state.wait_for_stamp(44.284, 0.0), Instant)
    # Odometry that goes on in its own time after the IMU went back is another clock.
    state.push_imu(imu(44.285))
    state.push_odometry(odometry(47.3))
    result = state.wait_for_stamp(44.285, 0.0)
    assert isinstance(result, Unavailable) and result.level == logging.ERROR, result


def test_messages_missing_from_a_fixed_rate_source_are_counted_by_their_stamps():
    # IMU at 1 kHz with 3 messages lost after 5 ms and 2 after 20 ms; odometry at 250 Hz whole;
    # a 5 s pause (a jump) is no drop. Stamps in ms, as integers, to keep the steps exact.
    state = SensorState(StateSettings(), clock=FakeClock())
    imu_ms = [ms for ms in range(0, 41) if ms not in (6, 7, 8, 21, 22)] + [5040, 5041]
    for ms in imu_ms:
        state.push_imu(imu(ms / 1000))
    for ms in range(0, 41, 4):
        state.push_odometry(odometry(ms / 1000))
    assert state.meters['imu'].missed == 5
    assert state.meters['imu'].stamp_step == pytest.approx(0.001)
    assert state.meters['odometry'].missed == 0


def test_one_early_stamp_does_not_change_a_fixed_rate_sources_period():
    # IMU at 1 kHz in microseconds: one stamp 50 us after the one before (a simulator's
    # catch-up step), then 2 messages lost at 30 ms. Only those 2 are missing.
    state = SensorState(StateSettings(), clock=FakeClock())
    imu_us = [us for us in range(0, 41000, 1000) if us not in (30000, 31000)]
    imu_us.insert(imu_us.index(10000) + 1, 10050)
    for us in imu_us:
        state.push_imu(imu(us / 1e6))
    assert state.meters['imu'].stamp_step == pytest.approx(0.001)
    assert state.meters['imu'].missed == 2
