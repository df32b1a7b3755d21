"""Diagnostic levels a user can act on."""

import pytest

from ardupilot_json_bridge.checks.verdicts import Check, OK, UNDECIDED, WRONG
from ardupilot_json_bridge.core.settings import LinkSettings
from ardupilot_json_bridge.core.stats import InputMeter, LinkStats
from ardupilot_json_bridge.ros.diagnostics import BridgeMonitor, Level


def monitor():
    return BridgeMonitor(LinkSettings(instance=1), 'uav1/json_sitl_bridge',
                         {'imu': '/uav1/imu', 'odometry': '/uav1/odom', 'wind': '/uav1/wind'},
                         ['imu', 'odometry'])


def test_waiting_for_sitl():
    status = monitor().link_status(LinkStats(), 10.0)
    assert status.level is Level.WARN
    assert 'waiting for SITL on UDP port 9012' in status.message
    assert status.name == 'uav1/json_sitl_bridge: SITL link'


def test_connected_rate_and_stalled():
    watcher, stats = monitor(), LinkStats()
    stats.last_packet, stats.peer, stats.frame_rate_hint = 10.0, ('127.0.0.1', 5555), 1200
    watcher.link_status(stats, 10.0)
    stats.replied, stats.last_packet = 1200, 11.0
    status = watcher.link_status(stats, 11.0)
    assert status.level is Level.OK and status.values['frame_rate_hz'] == '1200.0'
    assert status.values['sitl_address'] == '127.0.0.1:5555'
    assert status.values['sitl_rate_hz'] == '1200'
    status = watcher.link_status(stats, 14.0)
    assert status.level is Level.ERROR and 'stalled' in status.message


def test_wire_faults_are_shown_and_warn_while_they_grow():
    watcher, stats = monitor(), LinkStats()
    stats.last_packet, stats.replied = 1.0, 100
    assert watcher.link_status(stats, 1.0).level is Level.OK
    stats.late, stats.duplicates, stats.lost, stats.strangers, stats.resent = 2, 1, 3, 4, 5
    status = watcher.link_status(stats, 1.5)
    assert status.level is Level.WARN
    assert status.message == ('connected; since the last report the wire or SITL gave 2 late, '
                              '1 duplicates, 5 resent, 3 lost, 4 strangers frame(s): see the log')
    assert {k: status.values[k] for k in ('late', 'duplicates', 'resent', 'lost', 'strangers')} \
        == {'late': '2', 'duplicates': '1', 'resent': '5', 'lost': '3', 'strangers': '4'}
    stats.replied = 200
    assert watcher.link_status(stats, 2.0).level is Level.OK


def test_unanswered_frames_warn_once():
    watcher, stats = monitor(), LinkStats()
    stats.last_packet = 1.0
    stats.unanswered = 3
    assert watcher.link_status(stats, 1.0).level is Level.WARN
    assert watcher.link_status(stats, 1.5).level is Level.OK


@pytest.mark.parametrize('name,count,age,rejected,level,text', [
    ('imu', 0, None, 0, Level.ERROR, 'no messages on /uav1/imu'),
    ('wind', 0, None, 0, Level.WARN, 'no messages'),
    ('odometry', 10, 3.0, 0, Level.ERROR, 'stale'),
    ('imu', 10, 0.01, 2, Level.WARN, '2 invalid'),
    ('imu', 10, 0.01, 0, Level.OK, 'Hz'),
])
def test_inputs(name, count, age, rejected, level, text):
    meter = InputMeter(name)
    for i in range(count):
        meter.record(float(i))
    meter.rejected = rejected
    now = (count - 1 + age) if count else 0.0
    status = monitor().input_status(meter, now)
    assert status.level is level and text in status.message
    assert status.values['topic'].startswith('/uav1/')


def test_statuses_cover_configured_inputs_only():
    statuses = monitor().statuses(LinkStats(), [InputMeter('imu'), InputMeter('rc')], 0.0)
    assert [s.name for s in statuses] == ['uav1/json_sitl_bridge: SITL link',
                                          'uav1/json_sitl_bridge: input imu',
                                          'uav1/json_sitl_bridge: conventions']


@pytest.mark.parametrize('gap, words', [
    (-1.795e9, 'another clock (wall time against simulated time'),  # wall-stamped airspeed
    (2.5, '2.50 s behind physics time'),
])
def test_an_input_received_but_left_out_warns_why_with_a_count(gap, words):
    watcher, meter = monitor(), InputMeter('wind')
    for i in range(10):
        meter.record(i * 0.01)
    assert watcher.input_status(meter, 0.1).level is Level.OK
    meter.left_out, meter.left_out_gap = 30, gap
    status = watcher.input_status(meter, 0.1)
    assert status.level is Level.WARN
    assert '30 time(s) left out of replies' in status.message and words in status.message
    assert status.values['left_out'] == '30' and status.values['used'] == '0'
    meter.used += 5
    assert watcher.input_status(meter, 0.1).level is Level.OK   # nothing new left out


def test_conventions_status_warns_with_the_fix():
    checks = [Check('gravity', OK, '9.81 up'), Check('twist frame', UNDECIDED, 'at rest'),
              Check('imu mounting', WRONG, 'rpy [180, 0, 0]', 'imu_mounting_rpy: [180, 0, 0]')]
    status = monitor().conventions_status(checks)
    assert status.level is Level.WARN and status.name == 'uav1/json_sitl_bridge: conventions'
    assert status.message == 'imu mounting: imu_mounting_rpy: [180, 0, 0]'
    assert status.values['twist frame'] == 'undecided: at rest'
    status = monitor().conventions_status(checks[:2])
    assert status.level is Level.OK and status.message.startswith('1 ok, 1 undecided')


def test_frames_unanswered_for_odometry_on_another_clock_are_an_error_until_they_stop():
    watcher, meter = monitor(), InputMeter('odometry')
    for i in range(10):
        meter.record(i * 0.01)
    reason = ("odometry stamps are 1700000000.000 s ahead of the IMU's, another clock "
              '(...); stamp both with the physics time: start every node with use_sim_time')
    meter.unanswered, meter.fault, meter.fault_is_error = 240, reason, True
    status = watcher.input_status(meter, 0.1)
    assert status.level is Level.ERROR
    assert status.message == f'240 SITL frame(s) unanswered: {reason}'
    assert status.values['unanswered_frames'] == '240'
    # Odometry back on the IMU's clock: no new frame unanswered, OK again.
    assert watcher.input_status(meter, 0.1).level is Level.OK
    # A fault that waiting may mend (physics late for a frame) is a warning.
    meter.unanswered, meter.fault, meter.fault_is_error = 241, 'samples stop short', False
    assert watcher.input_status(meter, 0.1).level is Level.WARN


def test_a_link_process_that_ended_is_an_error_whatever_the_counters_say():
    ended = 'the link process was killed by SIGKILL: SITL is no longer served'
    (link, *_) = monitor().statuses(LinkStats(), [], 10.0, (), ended)
    assert (link.level, link.message) == (Level.ERROR, ended)


def test_messages_missing_by_the_stamps_warn_once_with_their_count():
    meter, judge = InputMeter('imu'), monitor()
    for stamp_gap in (0.001, 0.001, 0.004, 0.001):     # 3 messages missing in the third gap
        meter.record(9.9)
        meter.note_stamp_gap(stamp_gap)
    status = judge.input_status(meter, 10.0)
    assert status.level is Level.WARN and status.values['missed'] == '3'
    assert status.message.startswith('3 message(s) missing by the stamps (one every 1 ms)')
    assert judge.input_status(meter, 10.0).level is Level.OK
