"""
No input kills the convention checks: repeated, looped, jumping or arbitrary stamps, NaN.

Repeated stamps are named wrong, a clock that starts over starts the checks over, and the live
judge outlives any judgement that fails. `check` names missing topics instead of crashing.
"""

import logging
import math
import subprocess
import sys
import threading
from typing import List

from hypothesis import given, HealthCheck, settings, strategies as st
import numpy as np

from ardupilot_json_bridge.checks.conventions import ConventionChecker
from ardupilot_json_bridge.checks.live import LiveConventions
from ardupilot_json_bridge.checks.verdicts import Check, format_table, OK, UNDECIDED, WRONG
from ardupilot_json_bridge.sources.bagfile import write_bag
import ros_messages
import ros_motion


def filled(stream: ros_motion.Stream, checker: ConventionChecker, imu_copies: int = 1,
           offset: float = 0.0) -> ConventionChecker:
    for sample in ros_motion.imu_samples(stream):
        for _ in range(imu_copies):
            checker.add_imu(sample[0] + offset, *sample[1:])
    for sample in ros_motion.odometry_samples(stream):
        checker.add_odometry(sample[0] + offset, *sample[1:])
    return checker


def verdicts(checks: List[Check]) -> dict:
    return {c.name: c.verdict for c in checks}


def test_every_imu_stamp_repeated_is_named_wrong_and_the_rest_still_judged():
    checks = filled(ros_motion.Stream(seconds=4.0), ConventionChecker(), imu_copies=2).checks()
    found = {c.name: c for c in checks}
    assert found['time: imu stamps'].verdict == WRONG, format_table(checks)
    stamps = found['time: imu stamps'].measured
    assert '1000 Hz, 0 step(s) back, 4000 repeated' in stamps, format_table(checks)
    assert found['imu mounting'].verdict == OK, format_table(checks)


def test_a_clock_that_starts_over_starts_the_checks_over(caplog):
    checker = ConventionChecker(window=10.0)
    live = LiveConventions(checker, logging.getLogger('test.jump'))
    first = ros_motion.Stream(seconds=4.0, faults=('world_twist',))
    filled(first, checker)
    assert 'twist frame' in {c.name for c in live.judge() if c.verdict == WRONG}
    # The simulator resets: the same clock from 0 again, now without the fault.
    filled(ros_motion.Stream(seconds=4.0, phase=1.0), checker)
    with caplog.at_level(logging.INFO, logger='test.jump'):
        checks = live.judge()
    assert not [c for c in checks if c.verdict == WRONG], format_table(checks)
    lines = [r.getMessage() for r in caplog.records]
    assert any('jumped back from 3.999 to 0.000 s' in line and 'start over' in line
               for line in lines), lines


def arrivals(stream: ros_motion.Stream) -> list:
    """Return (stamp, add method name, sample) of both topics in stamp order."""
    events = [(sample[0], 'add_imu', sample) for sample in ros_motion.imu_samples(stream)]
    events += [(sample[0], 'add_odometry', sample)
               for sample in ros_motion.odometry_samples(stream)]
    return sorted(events, key=lambda event: event[0])


def test_a_topic_seen_to_jump_first_does_not_mix_the_two_runs():
    checker = ConventionChecker(window=10.0)
    old, new = arrivals(ros_motion.Stream(seconds=4.0)), arrivals(ros_motion.Stream(seconds=4.0))
    # The odometry of the old run's last half second arrives after the IMU started over.
    late = [e for e in old if e[1] == 'add_odometry' and e[0] > 3.5]
    early = [e for e in new if e[1] == 'add_imu' and e[0] < 0.3]
    events = ([e for e in old if e not in late] + early + late
              + [e for e in new if e not in early])
    for _, method, sample in events:
        getattr(checker, method)(*sample)
    checks = checker.checks()
    assert checker.jump_count == 1
    assert verdicts(checks)['time: odometry stamps'] == OK, format_table(checks)
    assert not [c for c in checks if c.verdict == WRONG], format_table(checks)


def test_a_small_step_back_is_wrong_not_a_restart():
    checker = ConventionChecker()
    stream = ros_motion.Stream(seconds=2.0)
    for k, sample in enumerate(ros_motion.imu_samples(stream)):
        checker.add_imu(sample[0] - (0.3 if k == 1000 else 0.0), *sample[1:])
    for sample in ros_motion.odometry_samples(stream):
        checker.add_odometry(*sample)
    assert verdicts(checker.checks())['time: imu stamps'] == WRONG
    assert checker.jump_count == 0


def test_non_finite_samples_are_left_out_and_named():
    checker = ConventionChecker()
    stream = ros_motion.Stream(seconds=4.0)
    for k, (stamp, gyro, accel) in enumerate(ros_motion.imu_samples(stream)):
        checker.add_imu(stamp, (math.nan, *gyro[1:]) if k == 100 else gyro, accel)
    for sample in ros_motion.odometry_samples(stream):
        checker.add_odometry(*sample)
    checks = checker.checks()
    found = {c.name: c for c in checks}
    assert not [c for c in checks if 'nan' in c.measured], format_table(checks)
    assert found['samples: finite'].verdict == WRONG
    assert '1 IMU sample(s)' in found['samples: finite'].measured
    assert found['time: imu rate'].verdict == OK, format_table(checks)


STAMPS = st.lists(st.one_of(st.floats(-1e10, 1e10), st.sampled_from([0.0, 1.0, 1.7e9])),
                  min_size=0, max_size=120)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(imu_stamps=STAMPS, odometry_stamps=STAMPS, seed=st.integers(0, 100),
       sorted_stamps=st.booleans())
def test_no_stamp_sequence_stops_the_judge(imu_stamps, odometry_stamps, seed, sorted_stamps):
    if sorted_stamps:
        imu_stamps, odometry_stamps = sorted(imu_stamps), sorted(odometry_stamps)
    rng = np.random.default_rng(seed)
    checker = ConventionChecker(window=10.0)
    for stamp in imu_stamps:
        checker.add_imu(stamp, rng.normal(0, 1, 3), rng.normal(0, 10, 3))
    for stamp in odometry_stamps:
        q = rng.normal(0, 1, 4)
        checker.add_odometry(stamp, rng.normal(0, 5, 3), q / np.linalg.norm(q),
                             rng.normal(0, 2, 3))
        checker.add_clock(stamp, stamp + rng.normal(0, 1))
    with np.errstate(all='ignore'):
        checks = LiveConventions(checker, logging.getLogger('test.fuzz')).judge()
    assert checks and all(c.verdict in (OK, WRONG, UNDECIDED) for c in checks)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(copies=st.integers(1, 3), step_back=st.sampled_from([0.0, 0.0025, 0.5, 5.0]),
       where=st.floats(0.1, 0.9))
def test_repeats_and_steps_back_in_a_real_stream_are_judged(copies, step_back, where):
    checker = ConventionChecker(window=10.0)
    stream = ros_motion.Stream(seconds=3.0)
    samples = list(ros_motion.imu_samples(stream))
    cut = int(where * len(samples))
    for k, sample in enumerate(samples):
        for _ in range(copies):
            checker.add_imu(sample[0] - (step_back if k >= cut else 0.0), *sample[1:])
    for sample in ros_motion.odometry_samples(stream):
        checker.add_odometry(*sample)
    checks = checker.checks()
    stamps = verdicts(checks).get('time: imu stamps')
    if copies > 1 or 0 < step_back < 1.0:
        assert stamps == WRONG, format_table(checks)


class FailingOnce(ConventionChecker):
    """A checker whose first judgement raises, as an unforeseen input might make it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.second = threading.Event()

    def checks(self) -> List[Check]:
        self.calls += 1
        if self.calls == 1:
            raise ZeroDivisionError('float division by zero')
        self.second.set()
        return super().checks()


def test_the_judge_thread_outlives_a_judgement_that_fails(caplog):
    checker = FailingOnce()
    live = LiveConventions(checker, logging.getLogger('test.outlives'), period=0.01)
    with caplog.at_level(logging.WARNING, logger='test.outlives'):
        live.start()
        try:
            assert checker.second.wait(30.0), 'the judge stopped after the first failure'
        finally:
            live.stop()
    assert any('ZeroDivisionError' in r.getMessage() for r in caplog.records)


def check_command(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'ardupilot_json_bridge.cli', 'check',
                           *arguments], capture_output=True, text=True, timeout=120)


def test_check_command_on_a_bag_with_every_imu_message_twice(tmp_path):
    store = ros_messages.STORES['jazzy']
    stream = ros_motion.Stream(seconds=4.0)
    messages = [('/imu', 'sensor_msgs/msg/Imu', round(t * 1e9) + copy,
                 ros_messages.imu(store, t, gyro, accel))
                for t, gyro, accel in ros_motion.imu_samples(stream) for copy in range(2)]
    messages += [('/odom', 'nav_msgs/msg/Odometry', round(t * 1e9),
                  ros_messages.odometry(store, t, position, q, linear))
                 for t, position, q, linear in ros_motion.odometry_samples(stream)]
    write_bag(str(tmp_path / 'twice'), sorted(messages, key=lambda m: m[2]), store)
    result = check_command(str(tmp_path / 'twice'))
    assert 'Traceback' not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'time: imu stamps' in result.stdout and 'repeated' in result.stdout


def test_check_command_with_a_namespace_that_matches_nothing_names_the_topics(tmp_path):
    bag = tmp_path / 'uav1'
    ros_messages.write_stream_bag(bag, ros_motion.Stream(seconds=2.0))
    result = check_command(str(bag), '--namespace', 'uav2')
    assert 'Traceback' not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 2, result.stdout + result.stderr
    assert '/uav2/imu' in result.stderr and '/uav2/odom' in result.stderr, result.stderr
    assert '/uav1/imu' in result.stderr and '/uav1/odom' in result.stderr, result.stderr


def test_check_command_leaves_a_nan_gyro_sample_out(tmp_path):
    store = ros_messages.STORES['jazzy']
    stream = ros_motion.Stream(seconds=4.0)
    messages = [('/imu', 'sensor_msgs/msg/Imu', round(t * 1e9),
                 ros_messages.imu(store, t, (math.nan, 0.0, 0.0) if k == 50 else gyro, accel))
                for k, (t, gyro, accel) in enumerate(ros_motion.imu_samples(stream))]
    messages += [('/odom', 'nav_msgs/msg/Odometry', round(t * 1e9),
                  ros_messages.odometry(store, t, position, q, linear))
                 for t, position, q, linear in ros_motion.odometry_samples(stream)]
    write_bag(str(tmp_path / 'nan'), sorted(messages, key=lambda m: m[2]), store)
    result = check_command(str(tmp_path / 'nan'))
    rate = [line for line in result.stdout.splitlines() if line.startswith('time: imu rate')]
    assert rate and ' ok ' in rate[0] and 'nan' not in rate[0], result.stdout + result.stderr
    assert 'samples: finite' in result.stdout


class NotStopped(Exception):
    """The endless bag was still being read long after the signal."""


def endless_bag(signal_after: int, give_up: float):
    """
    Read a bag that never ends (a vehicle at rest, 100 Hz): a bag too large to wait for.

    After signal_after messages the process gets SIGINT, as from Ctrl-C; a check still
    reading give_up seconds later raises NotStopped.
    """
    import os
    import signal
    import time
    from ardupilot_json_bridge.sources.bagfile import BagMessage
    store = ros_messages.STORES['jazzy']
    deadline = None
    for index in range(10 ** 9):
        if index == signal_after:
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + give_up
        if deadline is not None and time.monotonic() > deadline:
            raise NotStopped(f'still reading {give_up} s after SIGINT ({index} messages)')
        stamp = index * 0.01
        log_ns = round(stamp * 1e9)
        yield BagMessage('/imu', log_ns, ros_messages.imu(
            store, stamp, (0.0, 0.0, 0.0), (0.0, 0.0, 9.81)))
        yield BagMessage('/odom', log_ns, ros_messages.odometry(
            store, stamp, (0.0, 0.0, 0.1), (0.0, 0.0, 0.0, 1.0)))


def test_check_stops_reading_on_ctrl_c_and_says_so(monkeypatch, caplog, capsys):
    # The handler set a flag run_check never read: a large bag was read to its end.
    import signal
    from ardupilot_json_bridge import cli
    from ardupilot_json_bridge.sources import bagfile
    monkeypatch.setattr(bagfile, 'read_messages',
                        lambda bag, topics: endless_bag(signal_after=500, give_up=5.0))
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = cli.main(['check'])
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    assert code == cli.INTERRUPTED == 130
    assert 'check: stopped after' in caplog.text and 'the checks judge those only' in \
        caplog.text, caplog.text
    # What was read before the signal is judged: at rest, gravity is measured.
    assert 'gravity' in capsys.readouterr().out
