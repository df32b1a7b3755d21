"""
The convention checker against an independent generator (test/ros_motion.py) with faults.

Each fault alone and in pairs is named with the right fix; applying a fix of the bridge's
parameters makes every check ok; clean streams at Gazebo, Webots and Isaac Sim rates give no
wrong verdict; a resting vehicle gives gravity verdicts and undecided for the rest.
"""

import json
import logging
import math
import subprocess
import sys
from typing import Any, List

from hypothesis import given, settings, strategies as st
import numpy as np
import pytest

from ardupilot_json_bridge.checks import timing
from ardupilot_json_bridge.checks.conventions import ConventionChecker
from ardupilot_json_bridge.checks.live import LiveConventions
from ardupilot_json_bridge.checks.verdicts import Check, format_table, OK, UNDECIDED, WRONG
import ros_messages
import ros_motion

# fault: (check that must be wrong, words of its fix)
NAMED = {
    'frd_imu': ('imu mounting', 'imu_mounting_rpy: [180.0, 0.0, 0.0]'),
    'gyro_deg': ('units: gyro', 'rad/s'),
    'accel_g': ('gravity', 'm/s^2 (it reads g)'),
    'no_gravity': ('gravity', 'no gravity'),
    'gravity_reversed': ('gravity', 'negate linear_acceleration'),
    'world_twist': ('twist frame', 'odom_twist_frame: world'),
    'w_first': ('quaternion: order and motion', 'x, y, z, w (it is w, x, y, z)'),
    'non_unit': ('quaternion: unit', 'unit quaternions'),
    'ned_world': ('gravity', 'ENU world'),
    'odom_late': ('time: imu to odometry', 'the odometry stamps are 50 ms late'),
    'planar_odometry': ('odometry: height', "Gazebo's OdometryPublisher needs <dimensions>3"),
}
# The fixes a user applies in the bridge's parameters (the others change the simulator).
PARAMETER_FIXES = {'frd_imu': {'imu_mounting_rpy': (180.0, 0.0, 0.0)},
                   'world_twist': {'odom_twist_frame': 'world'}}


LATENCY = ros_messages.LATENCY


def judged(stream: ros_motion.Stream, **parameters) -> List[Check]:
    checker = ConventionChecker(**parameters)
    for sample in ros_motion.imu_samples(stream):
        checker.add_imu(*sample)
        checker.add_clock(sample[0], sample[0] + LATENCY)
    for sample in ros_motion.odometry_samples(stream):
        checker.add_odometry(*sample)
    return checker.checks()


def wrong(checks: List[Check]) -> dict:
    return {c.name: c.fix for c in checks if c.verdict == WRONG}


@pytest.mark.parametrize('fault', sorted(NAMED))
def test_each_fault_alone_is_named_with_its_fix(fault):
    checks = judged(ros_motion.Stream(faults=(fault,)))
    name, fix = NAMED[fault]
    print(f'\n{fault}:\n{format_table(checks)}')
    assert list(wrong(checks)) == [name], format_table(checks)
    assert fix in wrong(checks)[name]


@pytest.mark.parametrize('faults', [('frd_imu', 'world_twist'), ('ned_world', 'gyro_deg'),
                                    ('frd_imu', 'gyro_deg'), ('w_first', 'world_twist'),
                                    ('frd_imu', 'odom_late')])
def test_faults_in_pairs_are_each_named(faults):
    checks = judged(ros_motion.Stream(faults=faults))
    expected = {NAMED[fault][0]: NAMED[fault][1] for fault in faults}
    found = wrong(checks)
    assert set(found) == set(expected), format_table(checks)
    assert all(words in found[name] for name, words in expected.items())


@pytest.mark.parametrize('faults', [('frd_imu',), ('world_twist',), ('frd_imu', 'world_twist')])
def test_applying_the_suggested_parameters_makes_every_check_ok(faults):
    parameters = {}
    for fault in faults:
        parameters.update(PARAMETER_FIXES[fault])
    checks = judged(ros_motion.Stream(faults=faults), **parameters)
    assert all(c.verdict == OK for c in checks), format_table(checks)


@settings(max_examples=12, deadline=None)
@given(phase=st.floats(0.0, 6.28), seed=st.integers(0, 1000),
       rates=st.sampled_from([(1000.0, 250.0), (1000 / 32, 1000 / 32), (60.0, 60.0),
                              (400.0, 100.0)]),
       seconds=st.sampled_from([4.0, 8.0]))
def test_clean_streams_give_no_false_alarm(phase, seed, rates, seconds):
    stream = ros_motion.Stream(imu_rate=rates[0], odom_rate=rates[1], phase=phase, seed=seed,
                               seconds=seconds)
    checks = judged(stream)
    assert not wrong(checks), format_table(checks)


# A loaded machine (issue 19, item 12): skipped frames, uneven steps and a crash landing, as
# seen in a two-vehicle flight on 2 cores; none is a convention fault.
LOADED = {
    'skipped frames, vibration': dict(skipped=0.5, vibration=0.02),
    'uneven steps, vibration': dict(irregular=0.9, vibration=0.02),
    'skipped frames at 60 and 30 Hz': dict(skipped=0.5, imu_rate=60.0, odom_rate=30.0),
    'crash landing at 250 and 60 Hz': dict(impact=2.0, imu_rate=250.0, odom_rate=60.0),
    'all of them': dict(skipped=0.5, irregular=0.9, impact=2.0, vibration=0.02),
}


@pytest.mark.parametrize('seed', [1, 3])
@pytest.mark.parametrize('load', sorted(LOADED))
def test_a_loaded_machine_is_no_convention_fault(load, seed):
    checks = judged(ros_motion.Stream(seconds=4.0, seed=seed, **LOADED[load]))
    assert not wrong(checks), format_table(checks)


@pytest.mark.parametrize('fault', ['frd_imu', 'gyro_deg', 'world_twist', 'odom_late'])
def test_faults_are_still_named_on_a_loaded_machine(fault):
    checks = judged(ros_motion.Stream(seconds=6.0, faults=(fault,), skipped=0.3,
                                      irregular=0.2, impact=3.0))
    name, fix = NAMED[fault]
    assert list(wrong(checks)) == [name], format_table(checks)
    assert fix in wrong(checks)[name]


def test_an_imu_too_slow_is_named_though_frames_are_skipped():
    checks = judged(ros_motion.Stream(imu_rate=60.0, vibration=0.01, seconds=4.0, skipped=0.3))
    assert 'time: imu rate' in wrong(checks), format_table(checks)


def test_stamps_too_uneven_leave_the_rates_undecided_and_say_why():
    checks = {c.name: c for c in judged(ros_motion.Stream(seconds=4.0, irregular=1.0,
                                                          skipped=0.6))}
    for name in ('time: imu rate', 'time: odometry rate'):
        assert checks[name].verdict == UNDECIDED, checks[name]
        assert 'too uneven to judge the rate' in checks[name].measured, checks[name]


@pytest.mark.parametrize('imu_span, odometry_span', [
    ((0.0, 5.0), (0.0, 6.0)),         # odometry queued ahead of the IMU (a replay's read-ahead)
    ((1.0, 6.0), (0.0, 6.0)),         # the IMU subscribed a second later
    ((0.0, 6.0), (0.5, 5.5)),
])
def test_imu_and_odometry_over_different_spans_give_no_false_alarm(imu_span, odometry_span):
    stream = ros_motion.Stream(seconds=6.0)
    checker = ConventionChecker()
    for sample in ros_motion.imu_samples(stream):
        if imu_span[0] <= sample[0] <= imu_span[1]:
            checker.add_imu(*sample)
    for sample in ros_motion.odometry_samples(stream):
        if odometry_span[0] <= sample[0] <= odometry_span[1]:
            checker.add_odometry(*sample)
    checks = checker.checks()
    assert not wrong(checks), format_table(checks)
    assert {c.name: c.verdict for c in checks}['imu mounting'] == OK, format_table(checks)


def test_imu_and_odometry_that_never_overlap_are_named():
    stream = ros_motion.Stream(seconds=6.0)
    checker = ConventionChecker()
    for sample in ros_motion.imu_samples(stream):
        if sample[0] < 2.0:
            checker.add_imu(*sample)
    for sample in ros_motion.odometry_samples(stream):
        if sample[0] > 3.0:
            checker.add_odometry(*sample)
    checks = checker.checks()
    assert 'the same clock' in wrong(checks).get('time: imu to odometry', ''), format_table(
        checks)
    assert list(wrong(checks)) == ['time: imu to odometry'], format_table(checks)


@pytest.mark.parametrize('faults, gravity', [((), OK), (('frd_imu',), WRONG),
                                             (('accel_g',), WRONG)])
def test_at_rest_only_gravity_decides(faults, gravity):
    checks = {c.name: c for c in judged(ros_motion.Stream(moving=False, faults=faults))}
    assert checks['gravity'].verdict == gravity
    for name in ('units: gyro', 'quaternion: order and motion', 'imu mounting', 'twist frame'):
        assert checks[name].verdict == UNDECIDED
    if faults == ('frd_imu',):
        assert 'imu_mounting_rpy: [180.0, 0.0, 0.0]' in checks['gravity'].fix


def test_an_imu_too_slow_for_the_vibration_is_named_with_the_rate_it_needs():
    shaking = dict(vibration=0.01, seconds=4.0)
    checks = judged(ros_motion.Stream(imu_rate=60.0, **shaking))
    print(f'\n60 Hz IMU, {ros_motion.VIBRATION_HZ} Hz vibration:\n{format_table(checks)}')
    fixes = wrong(checks)
    assert 'time: imu rate' in fixes, format_table(checks)
    needed = float(fixes['time: imu rate'].split('at ')[1].split(' Hz')[0])
    assert 60.0 < needed
    assert 'time: imu rate' not in wrong(judged(ros_motion.Stream(imu_rate=1000.0, **shaking)))


def test_odometry_too_slow_for_the_motion_is_named():
    checks = judged(ros_motion.Stream(odom_rate=2.0, seconds=12.0))
    print(f'\n2 Hz odometry:\n{format_table(checks)}')
    assert 'publish odometry at' in wrong(checks).get('time: odometry rate', ''), \
        format_table(checks)


@pytest.mark.parametrize('stamp, clock, words', [
    (1.7e9 + 5.0, 5.002, 'wall-clock time while the clock is simulated'),
    (5.0, 1.7e9 + 5.0, 'use_sim_time: true'),
    (5.0, 7.5, 'not a queued or delayed time'),
    (5.0, 4.0, '/clock'),
])
def test_stamps_on_another_clock_are_named(stamp, clock, words):
    checker = ConventionChecker()
    for k in range(50):
        checker.add_clock(stamp + 0.01 * k, clock + 0.01 * k)
    check = timing.clock_check(np.array(checker._clock))
    assert check.verdict == WRONG and words in check.fix, check


@pytest.mark.parametrize('latency', [0.0, 0.004, 0.2])
def test_stamps_on_the_clock_are_ok(latency):
    pairs = np.array([(5.0 + 0.01 * k, 5.0 + 0.01 * k + latency) for k in range(50)])
    assert timing.clock_check(pairs).verdict == OK


def test_stamps_that_go_back_are_wrong():
    checker = ConventionChecker()
    for k, sample in enumerate(ros_motion.imu_samples(ros_motion.Stream(seconds=1.0))):
        stamp = sample[0] - (0.002 if k % 100 == 50 else 0.0)
        checker.add_imu(stamp, *sample[1:])
    for sample in ros_motion.odometry_samples(ros_motion.Stream(seconds=1.0)):
        checker.add_odometry(*sample)
    assert 'time: imu stamps' in wrong(checker.checks())


def check_command(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'ardupilot_json_bridge.cli', 'check',
                           *arguments], capture_output=True, text=True, timeout=120)


def test_check_command_names_the_fix_and_exits_1_until_it_is_applied(tmp_path):
    bag = tmp_path / 'frd_imu'
    ros_messages.write_stream_bag(bag, ros_motion.Stream(faults=('frd_imu',), seconds=6.0))
    result = check_command(str(bag), '--namespace', 'uav1')
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'imu_mounting_rpy: [180.0, 0.0, 0.0]' in result.stdout
    config = tmp_path / 'fixed.yaml'
    config.write_text('/**:\n  ros__parameters:\n    imu_mounting_rpy: [180.0, 0.0, 0.0]\n')
    result = check_command(str(bag), '--namespace', 'uav1', '--config', str(config), '--json')
    assert result.returncode == 0, result.stdout + result.stderr
    verdicts = {c['name']: c['verdict'] for c in json.loads(result.stdout)}
    assert set(verdicts.values()) == {OK}


def test_check_command_names_wall_clock_stamps_against_a_simulated_clock(tmp_path):
    bag = tmp_path / 'wall_stamps'
    ros_messages.write_stream_bag(bag, ros_motion.Stream(seconds=6.0), stamp_offset=1.7e9)
    result = check_command(str(bag), '--namespace', 'uav1')
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'wall-clock time while the clock is simulated' in result.stdout


def test_check_command_on_the_shipped_sample_bag_finds_nothing_wrong():
    result = check_command()
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'gravity ' in result.stdout and 'wrong' not in result.stdout


def test_live_judge_warns_once_when_a_check_turns_wrong(caplog):
    checker = ConventionChecker(window=10.0)
    live = LiveConventions(checker, logging.getLogger('test.conventions'))
    stream = ros_motion.Stream(seconds=4.0, faults=('world_twist',))
    for sample in ros_motion.imu_samples(stream):
        checker.add_imu(*sample)
    for sample in ros_motion.odometry_samples(stream):
        checker.add_odometry(*sample)
    with caplog.at_level(logging.WARNING, logger='test.conventions'):
        live.judge()
        live.judge()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and 'odom_twist_frame: world' in lines[0], lines
    assert {c.name for c in live.latest if c.verdict == WRONG} == {'twist frame'}


@pytest.mark.parametrize('window', [10.0, 1.5])  # 1.5: the older frames go unread
def test_frames_handed_over_in_one_append_are_judged_as_samples_added_one_by_one(window):
    stream = ros_motion.Stream(seconds=4.0, imu_rate=400.0, odom_rate=400.0,
                               faults=('world_twist',))
    imu, odometry = list(ros_motion.imu_samples(stream)), list(
        ros_motion.odometry_samples(stream))
    assert [s[0] for s in imu] == [s[0] for s in odometry]  # one frame, one instant
    pwm = (1500,) * 4 + (0,) * 12
    one_by_one, handed_over = ConventionChecker(window=window), ConventionChecker(window=window)
    for index, ((stamp, gyro, accel), (_, position, orientation, linear)) in enumerate(
            zip(imu, odometry)):
        if index == len(imu) // 2:
            handed_over.checks()  # takes the frames so far: the rest go in on top
        one_by_one.add_imu(stamp, gyro, accel)
        one_by_one.add_odometry(stamp, position, orientation, linear)
        one_by_one.add_pwm(stamp, pwm)
        handed_over.add_frame(stamp, tuple(gyro), tuple(accel), tuple(position),
                              tuple(orientation), tuple(linear), pwm)
    expected, checks = one_by_one.checks(), handed_over.checks()
    for held in ('_imu', '_odometry', '_pwm'):  # the same samples held
        assert list(getattr(handed_over, held)) == list(getattr(one_by_one, held)), held
    assert [(c.name, c.verdict, c.measured) for c in checks] == [
        (c.name, c.verdict, c.measured) for c in expected]
    assert 'odom_twist_frame: world' in wrong(checks).get('twist frame', ''), format_table(
        checks)
    handed_over.add_frame(*imu[0][:1], (0.0,) * 3, (0.0, 0.0, 9.8), (0.0,) * 3,
                          (0.0, 0.0, 0.0, 1.0), (0.0,) * 3, pwm)
    handed_over.clear()  # a restart forgets the frames not yet judged too
    assert handed_over.checks()[0].measured.startswith('0 IMU and 0 odometry')


JUDGE = 'judge'  # in a scenario's stamps: a judgement of the frames handed over so far


def _level_frame(checker: ConventionChecker, stamp: Any, gyro: tuple = (0.0,) * 3) -> None:
    checker.add_frame(stamp, gyro, (0.0, 0.0, 9.8), (0.0,) * 3, (0.0, 0.0, 0.0, 1.0),
                      (0.0,) * 3, (1500,) * 4)


def _steps(first: float, count: int, step: float) -> List[float]:
    return [first + k * step for k in range(count)]


# Stamps (and where a judgement falls) that frames older than the window may be dropped from.
HAND_OVER_SCENARIOS = {
    # 30 s to 35 s, back to 1 s (a reset) and on to 60 s: the jump among the dropped frames.
    'jump among the old frames': (20.0, _steps(30.0, 51, 0.1) + _steps(1.0, 591, 0.1), ()),
    'jump after a judgement': (20.0, _steps(30.0, 51, 0.1) + [JUDGE] + _steps(1.0, 591, 0.1),
                               ()),
    # The IMU refused throughout: the jump is seen on the odometry's clock.
    'jump with the imu refused': (20.0, _steps(90.0, 101, 0.1) + [JUDGE]
                                  + _steps(50.0, 301, 0.1), 'all'),
    'not finite among the old frames': (1.0, _steps(0.005, 400, 0.005), (10, 11)),
    # k / 1200: a stamp the window's length before the newest, as the trim reckons it.
    'at the edge of the window': (20.0, [k / 1200 for k in range(1, 24004)], ()),
    'newest not finite': (1.0, _steps(0.005, 100, 0.005) + [math.inf], ()),
}


@pytest.mark.parametrize('scenario', sorted(HAND_OVER_SCENARIOS))
def test_frames_dropped_unread_leave_what_adding_them_one_by_one_leaves(scenario):
    window, stamps, refused = HAND_OVER_SCENARIOS[scenario]
    handed_over, one_by_one = ConventionChecker(window=window), ConventionChecker(window=window)
    frame = 0
    for stamp in stamps:
        if stamp == JUDGE:
            handed_over.checks()
            continue
        gyro = (math.nan, 0.0, 0.0) if refused == 'all' or frame in refused else (0.0,) * 3
        _level_frame(handed_over, stamp, gyro)
        _level_frame(one_by_one, stamp, gyro)
        one_by_one.checks() if frame % 97 == 0 else None
        frame += 1
    checks, expected = handed_over.checks(), one_by_one.checks()
    for held in ('_imu', '_odometry', '_pwm'):
        assert list(getattr(handed_over, held)) == list(getattr(one_by_one, held)), held
    assert (handed_over.jump_count, handed_over.last_jump, handed_over.rejected) == (
        one_by_one.jump_count, one_by_one.last_jump, one_by_one.rejected)
    assert [(c.name, c.verdict) for c in checks] == [(c.name, c.verdict) for c in expected]
    if 'jump' in scenario:
        assert handed_over.jump_count == 1
    if scenario == 'not finite among the old frames':
        assert handed_over.rejected['IMU'] == 2


@pytest.mark.parametrize('where,last_read', [('first', 1.5), ('among', 2.5), ('last', 3.0)])
@pytest.mark.parametrize('stamp', [None, np.array([0.0, 0.1])], ids=['none', 'array'])
def test_a_frame_stamped_with_no_number_raises_once_and_the_frames_after_it_are_read(
        stamp, where, last_read):
    checker = ConventionChecker(window=1.0)
    for k in range(1, 301):
        _level_frame(checker, k / 200)
    checker.checks()  # holds 0.5 s to 1.5 s
    for k in range(301, 601):
        if (where, k) in (('first', 301), ('among', 501)):
            _level_frame(checker, stamp)
        _level_frame(checker, k / 200)
    if where == 'last':
        _level_frame(checker, stamp)
    with pytest.raises(TypeError):
        checker.checks()
    # The samples read before the bad frame are trimmed to the window all the same.
    held = [s[0] for s in checker._imu]
    assert held[-1] == last_read and held[-1] - held[0] <= 1.0, held
    checker.checks()
    assert [s[0] for s in checker._imu] == [k / 200 for k in range(400, 601)]


def test_a_vibration_quicker_than_the_odometry_is_no_gravity_fault():
    # A level vehicle swaying east-west at 0.5 Hz and shaking up and down at 130 Hz (tyres'
    # chatter), IMU at 1200 Hz, odometry at 300 Hz: positions by hand, accelerations their
    # second derivatives. Twice differenced at 300 Hz the shaking reads about half as strong
    # as an IMU sample: judged point by point, gravity fitted 1.7 x the acceleration.
    sway, shake = 2 * np.pi * 0.5, 2 * np.pi * 130.0

    def position(t: float) -> list:
        return [-1.0 / sway ** 2 * np.sin(sway * t), 0.0, -3.0 / shake ** 2 * np.sin(shake * t)]

    checker = ConventionChecker()
    for k in range(6000):
        t = k / 1200
        checker.add_imu(t, (0.0, 0.0, 0.0),
                        (np.sin(sway * t), 0.0, 9.80665 + 3.0 * np.sin(shake * t)))
        if k % 4 == 0:
            velocity = [-np.cos(sway * t) / sway, 0.0, -3.0 * np.cos(shake * t) / shake]
            checker.add_odometry(t, position(t), (0.0, 0.0, 0.0, 1.0), velocity)
    (gravity,) = [c for c in checker.checks() if c.name == 'gravity']
    assert gravity.verdict == OK, gravity
    alpha = float(gravity.measured.split(' = ')[1].split(' x')[0])
    assert alpha == pytest.approx(1.0, abs=0.1), gravity
