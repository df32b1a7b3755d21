"""frame_count semantics and the session clock."""

import math

import pytest

from ardupilot_json_bridge.link.session import FrameGrid, FrameKind, SitlSession


def answered(session, frame, stamp, sequence=1):
    timestamp = session.timestamp_for(stamp)
    session.record_reply(frame, b'reply', sequence, stamp, timestamp)
    return timestamp


def answered_at(session, frame, stamp, now):
    """Record frame's reply as the link does, its sending at monotonic time now."""
    answered(session, frame, stamp)
    session.replied_at = now


def test_classification():
    session = SitlSession()
    assert session.classify(0, 10.0).kind is FrameKind.FIRST
    assert session.classify(0, 10.1).kind is FrameKind.RETRY
    answered_at(session, 0, 50.0, now=10.2)
    # SITL resends 1.1 s after its frame: a repeat 0.2 s after the reply is a copy.
    assert session.classify(0, 10.4).kind is FrameKind.DUPLICATE
    assert session.classify(0, 11.3).kind is FrameKind.RESENT
    verdict = session.classify(1, 11.4)
    assert (verdict.kind, verdict.lost) == (FrameKind.NEW, 0)
    verdict = session.classify(5, 11.5)
    assert (verdict.kind, verdict.lost) == (FrameKind.NEW, 3)


def test_a_lower_count_is_late_and_changes_nothing_unless_it_is_frame_0():
    session = SitlSession()
    session.classify(1198, 100.0)
    session.classify(1199, 100.001)
    # A late copy of frame 1100: not a restart, and frame 1199 is still the last.
    assert session.classify(1100, 100.002).kind is FrameKind.LATE
    assert session.last_frame == 1199
    verdict = session.classify(1200, 100.003)
    assert (verdict.kind, verdict.lost) == (FrameKind.NEW, 0)
    # Frame 0: SITL started again (seconds after this session's first frame).
    assert session.classify(0, 130.0).kind is FrameKind.RESTART


def test_frame_0_again_just_after_the_session_began_is_a_late_copy():
    session = SitlSession()
    session.classify(0, 5.0)
    session.classify(1, 5.001)
    session.classify(2, 5.002)
    # Reordered on the way: SITL cannot have restarted within RESEND_MIN of starting.
    assert session.classify(0, 5.003).kind is FrameKind.LATE
    assert session.last_frame == 2


def test_time_starts_at_zero_per_session():
    session = SitlSession()
    assert answered(session, 0, 1.7e9) == 0.0
    assert answered(session, 1, 1.7e9 + 0.001) == pytest.approx(0.001, abs=1e-6)
    session.reset()
    assert answered(session, 0, 1.7e9 + 5.0) == 0.0


def test_same_stamp_is_not_newer():
    session = SitlSession()
    answered(session, 0, 3.0)
    assert session.timestamp_for(3.0) is None


def test_time_going_back_keeps_sitl_clock_running():
    session = SitlSession()
    answered(session, 0, 10.0)
    answered(session, 1, 10.01)
    timestamp = session.timestamp_for(2.0)
    assert timestamp == pytest.approx(0.02)
    session.record_reply(2, b'', 3, 2.0, timestamp)
    assert session.timestamp_for(2.01) == pytest.approx(0.03)


def test_skipping_ahead_moves_the_source_instant_and_not_the_timestamp():
    grid = FrameGrid(5.0, 1200)
    for _ in range(11):
        grid.next_instant(1200)
        grid.advance()
    # Eleven frames answered (source 5.0 .. 5.0 + 10/1200); physics is now at 5.1 s.
    assert grid.skip_to(5.1) == 109              # (5.1 - (5.0 + 11 / 1200)) * 1200
    assert grid.next_instant(1200) == pytest.approx(5.1)
    assert grid.timestamp_of(grid.index + 1) == pytest.approx(11 / 1200)
    assert grid.passed_over == pytest.approx(109 / 1200)
    assert grid.skip_to(5.1005) == 0             # less than one frame ahead: nothing to pass


def test_catching_up_steps_two_frames_and_ignores_the_rate_it_echoes():
    grid = FrameGrid(0.0, 1200)
    for _ in range(10):
        grid.catch_up(grid.next_instant(1200), 0.05)
        grid.advance()
    # Ten frames answered (0 .. 9/1200); the source is at 0.1 s: 0.1 - 10/1200 = 0.0917 s ahead.
    assert grid.catch_up(0.1, 0.05) == 0 and grid.step == 2
    assert grid.next_instant(1200) == pytest.approx(11 / 1200)
    assert grid.next_timestamp() == pytest.approx(11 / 1200)
    assert grid.advance() == pytest.approx(11 / 1200)
    # SITL now reports 601 Hz (1 / (2/1200), plus its 1 Hz step towards SIM_RATE_HZ): an echo
    # of the double step, not a rate SITL chose, so the grid stays at 1200 Hz.
    assert grid.next_instant(601) == pytest.approx(13 / 1200) and grid.rate == 1200
    # Caught up to within a frame: single steps again, and a later rate change is followed.
    assert grid.catch_up(12.5 / 1200, 0.05) == 0 and grid.step == 1
    grid.advance()
    assert grid.next_instant(1199) == pytest.approx(12 / 1200 + 1 / 1199)
    # Beyond 4 x max_backlog: physics is passed over, the timestamp still steps one frame.
    assert grid.catch_up(0.5, 0.05) == math.floor((0.5 - (12 / 1200 + 1 / 1199)) * 1199)
    assert grid.step == 1 and grid.next_instant(1199) == pytest.approx(0.5, abs=1 / 1199)
    assert grid.next_timestamp() == pytest.approx(12 / 1200 + 1 / 1199)
