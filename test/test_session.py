"""frame_count semantics and the session clock."""

import pytest

from ardupilot_json_bridge.link.session import FrameGrid, FrameKind, SitlSession


def answered(session, frame, stamp, sequence=1):
    timestamp = session.timestamp_for(stamp)
    session.record_reply(frame, b'reply', sequence, stamp, timestamp)
    return timestamp


def test_classification():
    session = SitlSession()
    assert session.classify(0).kind is FrameKind.FIRST
    assert session.classify(0).kind is FrameKind.RETRY
    answered(session, 0, 50.0)
    assert session.classify(0).kind is FrameKind.DUPLICATE
    verdict = session.classify(1)
    assert (verdict.kind, verdict.lost) == (FrameKind.NEW, 0)
    verdict = session.classify(5)
    assert (verdict.kind, verdict.lost) == (FrameKind.NEW, 3)
    assert session.classify(2).kind is FrameKind.RESTART


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
