"""The UDP link over real loopback sockets, with the test SITL peer."""

from dataclasses import replace
import logging
import math
import socket
import threading
import time
from typing import List, Optional

import pytest

from ardupilot_json_bridge.core.protocol import encode_servo_packet, ServoPacket
from ardupilot_json_bridge.core.samples import ImuSample, OdometrySample
from ardupilot_json_bridge.core.settings import (
    GRID, LinkSettings, SAMPLES, sitl_port, StateSettings)
from ardupilot_json_bridge.core.state import Instant, SensorState, STARTUP_GRACE
from ardupilot_json_bridge.link.frame_answer import HELD
from ardupilot_json_bridge.link.sitl_link import SitlLink
from ardupilot_json_bridge.link.udp_port import LinkError
from conftest import free_udp_port, SkippingClock
from sitl_peer import parse_reply, RESEND_INTERVAL, SitlFrameRate, SitlPeer

LEVEL = (1.0, 0.0, 0.0, 0.0)


def feed(link: SitlLink, stamp: float, position=(1.0, 2.0, -3.0), gyro=(0.0, 0.0, 0.0)):
    link.state.push_odometry(OdometrySample(stamp, position, (0.0, 0.0, 0.0), LEVEL, gyro))
    link.state.push_imu(ImuSample(stamp, gyro, (0.0, 0.0, -9.80665)))


def wait_for(condition, timeout=2.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_sitl_port_per_instance():
    assert [sitl_port(i) for i in range(3)] == [9002, 9012, 9022]
    assert LinkSettings(instance=2).listen_port == 9022
    assert LinkSettings(instance=2, port=15000).listen_port == 15000


def test_lock_step_replies_with_advancing_time(make_link, make_peer):
    link = make_link()
    peer = make_peer(link.address[1])
    timestamps = []
    for i in range(5):
        feed(link, 1000.0 + i * 0.001)
        reply = peer.step()
        timestamps.append(reply['timestamp'])
        assert reply['position'] == (1.0, 2.0, -3.0)
        assert reply['imu.accel_body'] == pytest.approx((0.0, 0.0, -9.80665))
    assert timestamps == pytest.approx([0.0, 0.001, 0.002, 0.003, 0.004], abs=1e-9)
    assert wait_for(lambda: link.stats.replied == 5)
    assert link.stats.unanswered == 0


def test_a_copy_of_a_frame_is_not_answered_again_and_sitls_resend_is(make_link, make_peer):
    frames = []
    clock = SkippingClock()
    link = make_link(on_frame=frames.append, clock=clock)
    peer = make_peer(link.address[1])
    feed(link, 5.0)
    peer.send(frame_count=0)
    first = peer.receive()
    feed(link, 5.001)
    # A copy on the way, right after the reply: SITL would read a second reply as frame 1's.
    peer.send(frame_count=0)
    assert peer.receive(timeout=0.3) is None
    assert wait_for(lambda: link.stats.duplicates == 1)
    # SITL resends RESEND_INTERVAL after its frame got no reply (lost): the same reply again.
    clock.skip(RESEND_INTERVAL)
    peer.send(frame_count=0)
    assert peer.receive() == first
    assert wait_for(lambda: link.stats.resent == 1 and link.stats.replied == 2)
    assert len(frames) == 1


def test_a_peer_timeout_set_while_running_decides_when_a_stranger_may_take_over(
        make_link, make_peer):
    # ros2 param set peer_timeout replaces the link's settings (link_process): the next
    # stranger is judged by the new value, not the one the link started with.
    clock = SkippingClock()
    link = make_link(clock=clock, peer_timeout=5.0)
    first, second = make_peer(link.address[1]), make_peer(link.address[1])
    feed(link, 3.0)
    first.step()
    link.settings = replace(link.settings, peer_timeout=0.2)
    clock.skip(1.0)
    feed(link, 3.001, position=(4.0, 5.0, -6.0))
    second.frame_count = 40
    assert second.step()['position'] == (4.0, 5.0, -6.0)
    assert link.peer == second.address
    assert link.stats.strangers == 0 and link.stats.restarts == 1


def test_a_state_given_after_construction_is_the_one_answered_from(make_link, make_peer):
    link = make_link()
    peer = make_peer(link.address[1])
    feed(link, 2.0)
    link.state = SensorState(StateSettings(pacing=SAMPLES))
    feed(link, 2.5, position=(7.0, 8.0, -9.0))
    assert peer.step()['position'] == (7.0, 8.0, -9.0)
    assert link.stats.unanswered == 0


def test_a_late_frame_is_counted_and_changes_nothing(make_link, make_peer, caplog):
    # Issue 33 item 1: a late copy of frame 1100 after frame 1199 is no restart.
    link = make_link()
    peer = make_peer(link.address[1])
    peer.frame_count = 1100
    for i in range(100):
        feed(link, 10.0 + i * 0.001)
        peer.step()
    with caplog.at_level(logging.WARNING):
        peer.send(frame_count=1100)
        assert peer.receive(timeout=0.3) is None
    assert wait_for(lambda: link.stats.late == 1)
    assert link.stats.restarts == 0 and 'restarted' not in caplog.text
    assert 'ignored frame 1100, older than frame 1199' in caplog.text
    # SITL's next frame carries on from where it was: time and frames unchanged.
    feed(link, 10.1)
    assert peer.step()['timestamp'] == pytest.approx(0.1, abs=1e-9)
    assert link.stats.lost == 0


def test_lost_frames_are_counted(make_link, make_peer):
    link = make_link()
    peer = make_peer(link.address[1])
    feed(link, 1.0)
    peer.send(frame_count=0)
    assert peer.receive() is not None
    feed(link, 1.001)
    peer.send(frame_count=3)
    assert peer.receive() is not None
    assert wait_for(lambda: link.stats.lost == 2)


def test_restart_resets_time(make_link, make_peer, caplog):
    clock = SkippingClock()
    link = make_link(clock=clock)
    peer = make_peer(link.address[1])
    for i in range(3):
        feed(link, 10.0 + i * 0.01)
        peer.step()
    feed(link, 10.05)
    clock.skip(3.0)  # SITL takes seconds to start again
    with caplog.at_level(logging.WARNING):
        peer.frame_count = 0
        reply = peer.step()
    assert reply['timestamp'] == 0.0
    assert wait_for(lambda: link.stats.restarts == 1)
    assert 'SITL restarted' in caplog.text


def test_unanswered_retry_is_answered_when_data_arrives(make_link, make_peer, caplog):
    frames = []
    link = make_link(on_frame=frames.append, fresh_timeout=0.1)
    peer = make_peer(link.address[1])
    with caplog.at_level(logging.INFO):
        peer.send(frame_count=0)
        assert peer.receive(0.4) is None
    assert 'no reply to SITL frame 0' in caplog.text and 'imu' in caplog.text
    feed(link, 2.0)
    peer.send(frame_count=0)
    assert peer.receive() is not None
    assert wait_for(lambda: (link.stats.unanswered, link.stats.replied) == (1, 1))
    assert len(frames) == 1


def test_on_the_grid_a_frame_before_any_message_is_told_at_info_then_warned(make_link,
                                                                            make_peer, caplog):
    # The node's pacing: SITL's first frame before the simulator's first message is expected;
    # still none STARTUP_GRACE later is a fault, told even within the INFO line's rate limit.
    clock = SkippingClock()
    link = make_link(StateSettings(pacing=GRID), fresh_timeout=0.05)
    link.state = SensorState(StateSettings(pacing=GRID), clock=clock)
    peer = make_peer(link.address[1])
    with caplog.at_level(logging.INFO):
        peer.send(frame_count=0)
        assert peer.receive(0.3) is None
        clock.skip(STARTUP_GRACE)
        peer.send(frame_count=1)
        assert peer.receive(0.3) is None
        assert wait_for(lambda: link.stats.unanswered == 2)
    told = [(record.levelno, record.getMessage()) for record in caplog.records
            if 'no reply to SITL frame' in record.getMessage()]
    assert [level for level, _ in told] == [logging.INFO, logging.WARNING], told
    assert 'frame 0: imu: no message received yet (starting up' in told[0][1]
    assert told[1][1].endswith('frame 1: imu: no message received yet')


def test_on_the_grid_the_first_reply_is_time_zero_however_long_it_waited(make_link, make_peer):
    # IMU from 0 s, odometry only from 0.6 s (its subscription matched later): the first frames
    # cannot be answered, and the first reply, at the newest IMU stamp, must still be time 0.
    link = make_link(StateSettings(pacing=GRID, max_backlog=0.05), fresh_timeout=0.05)
    peer = make_peer(link.address[1])
    for k in range(150):
        link.state.push_imu(ImuSample(k * 0.004, (0.0, 0.0, 0.0), (0.0, 0.0, -9.80665)))
        if k % 10 == 0:
            peer.send(frame_count=0)
            assert peer.receive(0.1) is None
    for k in range(150, 160):
        feed(link, k * 0.004)
    assert peer.step()['timestamp'] == 0.0
    for k in range(160, 170):
        feed(link, k * 0.004)
    assert [peer.step()['timestamp'] * 1200 for _ in range(3)] == pytest.approx([1, 2, 3])
    assert link.stats.skipped == 0


@pytest.mark.parametrize('stall, passed_over', [(0.08, False), (0.3, True)])
def test_catching_up_with_physics_never_jumps_sitls_clock(make_link, caplog, stall,
                                                          passed_over):
    # SITL stalls (a loaded machine) while the simulator runs on; after it, SITL answers one
    # frame per 1/1200 s of physics. A reply whose timestamp jumped 80 ms would set SITL's
    # frame rate to 12.5 Hz (SIM_JSON.cpp: 1 / step), its next packets would say so, and a
    # link following them would hold SITL near that rate for seconds. Catching up must step
    # SITL's clock at most two frames a reply; a stall of more than 4 x max_backlog is passed
    # over instead, with SITL's clock stepping one frame.
    link = make_link(StateSettings(pacing=GRID, max_backlog=0.05), fresh_timeout=0.5)
    sitl = SitlFrameRate(1200.0)
    peer = SitlPeer(link.address[1], clock=sitl)
    physics = [0.0, 0]                 # the simulator's time (s) and its samples (1 kHz)

    def run_physics(seconds: float) -> None:
        physics[0] += seconds
        while (physics[1] + 1) * 0.001 <= physics[0] + 1e-9:
            physics[1] += 1
            feed(link, physics[1] * 0.001)

    def frame() -> float:
        for _ in range(100):
            peer.send()
            datagram = peer.receive(0.05)
            # A resent frame is answered twice (late, then as a duplicate): SITL drops both.
            while datagram is not None and timestamps and (
                    parse_reply(datagram)['timestamp'] <= timestamps[-1]):
                datagram = peer.receive(0.05)
            if datagram is not None:
                timestamp = parse_reply(datagram)['timestamp']
                peer.frame_count += 1
                sitl.accept(timestamp)
                return timestamp
            run_physics(0.001)         # the frame waits for physics
        raise AssertionError('the link stopped answering')

    timestamps: List[float] = []
    try:
        run_physics(0.02)
        for _ in range(20):
            timestamps.append(frame())
            run_physics(1 / 1200)
        with caplog.at_level(logging.WARNING):
            run_physics(stall)         # SITL stalled, the simulator did not
            while len(timestamps) < 400 and max(
                    b - a for a, b in zip(timestamps, timestamps[1:])) < 2.5 / 1200:
                timestamps.append(frame())
                run_physics(1 / 1200)
    finally:
        peer.close()
    steps = [b - a for a, b in zip(timestamps, timestamps[1:])]
    assert max(steps) <= 2 / 1200 + 1e-9, (
        f'a step of {max(steps) * 1000:.1f} ms set SITL to {sitl.lowest:.0f} Hz')
    assert sitl.lowest >= 599.0 and sitl.frame_rate == 1200
    warnings = [r.getMessage() for r in caplog.records if 'behind physics' in r.getMessage()]
    assert len(warnings) == 1 and 'lower SIM_RATE_HZ' in warnings[0], warnings
    if passed_over:
        assert link.stats.skipped > 0.1 * 1200 and 'passed over' in warnings[0], warnings
    else:
        # Every frame of physics was served: the stall was caught up, two frames a reply.
        assert link.stats.skipped == 0 and 'catching up' in warnings[0], warnings
        assert steps.count(pytest.approx(2 / 1200)) >= 0.07 * 1200
        assert steps[-1] == pytest.approx(1 / 1200)


def test_waits_for_fresh_physics_rather_than_repeating_a_timestamp(make_link, make_peer):
    link = make_link(fresh_timeout=2.0)
    peer = make_peer(link.address[1])
    feed(link, 1.0)
    peer.step()
    timer = threading.Timer(0.2, feed, args=(link, 1.0025))
    timer.start()
    started = time.monotonic()
    reply = peer.step(timeout=3.0)
    timer.join()
    assert time.monotonic() - started >= 0.15
    assert reply['timestamp'] == pytest.approx(0.0025)


def test_stale_data_gets_no_reply(make_link, make_peer):
    link = make_link(fresh_timeout=0.1)
    peer = make_peer(link.address[1])
    feed(link, 1.0)
    peer.step()
    peer.send()
    assert peer.receive(0.3) is None
    assert wait_for(lambda: link.stats.unanswered == 1)


def test_strangers_are_ignored_while_the_peer_lives(make_link, make_peer, caplog):
    link = make_link(peer_timeout=5.0)
    sitl, stranger = make_peer(link.address[1]), make_peer(link.address[1])
    feed(link, 1.0)
    sitl.step()
    with caplog.at_level(logging.WARNING):
        stranger.send(frame_count=40)
        assert stranger.receive(0.3) is None
    assert wait_for(lambda: link.stats.strangers == 1)
    assert 'Two SITL instances on one port' in caplog.text
    feed(link, 1.001)
    assert sitl.step()['timestamp'] == pytest.approx(0.001)


def test_a_sitl_restarted_from_a_new_port_is_served_at_once(make_link, make_peer, caplog):
    # A restarted SITL sends from a new port, starting at frame 0: no stranger, no wait.
    link = make_link()
    old, new = make_peer(link.address[1]), make_peer(link.address[1])
    for i in range(3):
        feed(link, 1.0 + i * 0.01)
        old.step()
    feed(link, 1.05)
    with caplog.at_level(logging.WARNING):
        reply = new.step(timeout=0.5)
    assert reply['timestamp'] == 0.0
    assert link.peer == new.address
    assert 'SITL restarted at' in caplog.text and 'Two SITL' not in caplog.text
    assert wait_for(lambda: link.stats.restarts == 1) and link.stats.strangers == 0


def test_new_address_takes_over_after_silence(make_link, make_peer, caplog):
    link = make_link(peer_timeout=0.2)
    old, new = make_peer(link.address[1]), make_peer(link.address[1])
    for i in range(3):
        feed(link, 1.0 + i * 0.01)
        old.step()
    time.sleep(0.3)
    feed(link, 1.05)
    new.frame_count = 3  # the same SITL, seen from a new address mid-flight
    with caplog.at_level(logging.WARNING):
        reply = new.step()
    assert reply['timestamp'] == 0.0
    assert link.peer == new.address
    assert 'SITL moved' in caplog.text
    assert wait_for(lambda: link.stats.restarts == 1)


@pytest.mark.parametrize('channels', [16, 32])
def test_channel_counts(make_link, make_peer, channels):
    frames = []
    link = make_link(on_frame=frames.append)
    peer = make_peer(link.address[1], channels=channels)
    feed(link, 1.0)
    peer.step(pwm=[1000 + i for i in range(channels)])
    assert frames[0].pwm == tuple(1000 + i for i in range(channels))
    assert link.stats.channel_count == channels


def test_malformed_datagrams_are_counted_and_explained(make_link, make_peer, caplog):
    link = make_link()
    peer = make_peer(link.address[1])
    with caplog.at_level(logging.WARNING):
        peer.send_raw(b'\n{"timestamp":0}\n')
        peer.send_raw(encode_servo_packet(0, [1500] * 16)[:30])
        assert peer.receive(0.2) is None
    assert wait_for(lambda: link.stats.rejected == 2)
    assert 'JSON text' in caplog.text
    feed(link, 1.0)
    assert peer.step()['timestamp'] == 0.0


def test_a_flood_of_bad_datagrams_is_one_line_per_kind_without_tracebacks(
        make_link, make_peer, caplog):
    link = make_link()
    peer = make_peer(link.address[1])
    kinds = [b'\n{"timestamp":0}\n', encode_servo_packet(0, [1500] * 16)[:30], b'\x00' * 7]
    with caplog.at_level(logging.DEBUG, logger=link.logger.name):
        for round_ in range(1, 101):
            for data in kinds:
                peer.send_raw(data)
            # Paced: a burst beyond the socket's buffer would be dropped on a busy machine.
            assert wait_for(lambda: link.stats.rejected == 3 * round_)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert 1 <= len(warnings) <= len(kinds), [r.getMessage() for r in warnings]
    assert all(r.exc_info is None and '\n' not in r.getMessage() for r in warnings)


def test_a_flood_of_datagrams_that_hit_a_bug_is_one_line_and_tracebacks_at_debug(
        make_link, make_peer, caplog):
    link = make_link()
    peer = make_peer(link.address[1])
    handled = []

    def broken(data, sender):
        handled.append(data)
        raise KeyError('a bug anywhere on the datagram path')

    link.handle_datagram = broken
    with caplog.at_level(logging.DEBUG, logger=link.logger.name):
        for count in range(1, 101):
            peer.send(frame_count=count)
            assert wait_for(lambda: len(handled) == count)
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) == 1 and loud[0].exc_info is None, [r.getMessage() for r in loud]
    assert "unexpected KeyError('a bug anywhere" in loud[0].getMessage()
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.exc_info)
    assert any(r.exc_info for r in caplog.records)


def test_port_in_use_names_port_instance_and_holder():
    port = free_udp_port()
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.bind(('127.0.0.1', port))
    try:
        with pytest.raises(LinkError) as error:
            SitlLink(LinkSettings(instance=3, port=port), SensorState(StateSettings()))
        message = str(error.value)
        assert f'UDP port {port}' in message and 'instance 3' in message
        assert 'pid' in message
    finally:
        holder.close()


def test_two_instances_at_once(make_link, make_peer):
    links = [make_link(instance=i) for i in range(2)]
    peers = [make_peer(link.address[1]) for link in links]
    for step in range(20):
        for index, link in enumerate(links):
            feed(link, 1.0 + step * 0.001, position=(float(index), 0.0, 0.0))
        for index, peer in enumerate(peers):
            assert peer.step()['position'] == (float(index), 0.0, 0.0)
    assert wait_for(lambda: [link.stats.replied for link in links] == [20, 20])


def test_stop_releases_the_port_and_ends_the_thread():
    port = free_udp_port()
    link = SitlLink(LinkSettings(port=port), SensorState(StateSettings()))
    link.start()
    link.stop()
    assert not link._thread.is_alive()
    again = SitlLink(LinkSettings(port=port), SensorState(StateSettings()))
    again.stop()


@pytest.mark.parametrize('flags', [{}, {'no_time_sync': True}, {'no_lockstep': True}])
def test_sync_flags_only_when_configured(make_link, make_peer, flags):
    link = make_link(**flags)
    peer = make_peer(link.address[1])
    feed(link, 1.0)
    reply = peer.step()
    for name in ('no_time_sync', 'no_lockstep'):
        assert reply.get(name, False) is flags.get(name, False)
        assert (name in reply) is (name in flags)


def test_a_clock_jump_back_while_a_frame_waits_is_seen_at_once_and_named(
        make_link, make_peer, caplog):
    # A simulator reset (or a looping bag) while the link waits for the next grid instant:
    # the frame is answered from the new clock, not left to time out as a "pause".
    logger = logging.getLogger('test.link.jump')
    link = make_link(StateSettings(pacing=GRID), fresh_timeout=10.0, logger=logger)
    peer = make_peer(link.address[1])
    for k in range(10):
        feed(link, 50.0 + k * 0.001)
    first = peer.step()
    # Well after the frame below starts waiting for physics past 50.009 s, the clock restarts.
    timer = threading.Timer(0.3, lambda: [feed(link, 2.0 + k * 0.001) for k in range(10)])
    with caplog.at_level(logging.INFO, logger='test.link.jump'):
        timer.start()
        reply = peer.step(timeout=8.0)
        timer.join()
    assert (reply['timestamp'] - first['timestamp']) * 1200 == pytest.approx(1.0)
    # The first frame starts the grid at the newest sample, 50.000 + 9 x 0.001 = 50.009 s, and
    # is the last served before the jump; the frame that waited asked for 50.009 + 1/1200 s.
    assert 'physics time went back from 50.009 to 2.' in caplog.text, caplog.text
    assert 'paused or stopped' not in caplog.text, caplog.text
    assert link.stats.unanswered == 0


def test_odometry_on_the_wall_clock_is_one_error_naming_the_clocks_and_replies_resume(
        make_link, make_peer, caplog):
    logger = logging.getLogger('test.link.clocks')
    link = make_link(StateSettings(pacing=GRID), fresh_timeout=0.05, logger=logger)
    peer = make_peer(link.address[1])
    wall = time.time()
    for k in range(10):
        link.state.push_odometry(OdometrySample(wall + k * 0.004, (1.0, 2.0, -3.0),
                                                (0.0, 0.0, 0.0), LEVEL, (0.0, 0.0, 0.0)))
        link.state.push_imu(ImuSample(20.0 + k * 0.004, (0.0, 0.0, 0.0), (0.0, 0.0, -9.80665)))
    with caplog.at_level(logging.INFO, logger='test.link.clocks'):
        for _ in range(20):
            peer.send()
            assert peer.receive(0.1) is None
        assert wait_for(lambda: link.stats.unanswered == 20)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, caplog.text
    assert 'IMU 20.036 s: simulated time' in errors[0].message
    assert 'wall-clock time' in errors[0].message and 'use_sim_time:=true' in errors[0].message
    assert link.state.meters['odometry'].unanswered == 20
    # The simulator's odometry back on the IMU's clock: the next frame is answered.
    feed(link, 20.040)
    assert peer.step()['timestamp'] == 0.0


def test_imu_stamps_alternating_between_two_clocks_give_one_line_not_one_per_frame(
        make_link, make_peer, caplog):
    # One IMU topic, two publishers on two clocks (50 s and 2 s), 1 kHz each, interleaved:
    # every 2 s sample is a jump back. Said once (rate-limited), naming both clocks.
    logger = logging.getLogger('test.link.two_clocks')
    link = make_link(StateSettings(pacing=GRID), fresh_timeout=0.5, logger=logger)
    peer = make_peer(link.address[1])
    stop = threading.Event()

    def two_publishers():
        k = 0
        while not stop.is_set():
            feed(link, 50.0 + k * 0.001)
            feed(link, 2.0 + k * 0.001)
            k += 1
            time.sleep(0.001)
    publishers = threading.Thread(target=two_publishers)
    publishers.start()
    try:
        assert wait_for(lambda: link.state.resets >= 2)
        with caplog.at_level(logging.INFO, logger='test.link.two_clocks'):
            for _ in range(50):
                peer.step(timeout=1.0)
    finally:
        stop.set()
        publishers.join()
    lines = [r.getMessage() for r in caplog.records
             if 'went back' in r.getMessage() or 'two clocks' in r.getMessage()]
    assert len(lines) == 1, f'{len(lines)} lines, first: {lines[:2]}'
    assert 'imu stamps alternate between two clocks, 50.' in lines[0], lines[0]
    assert ' and 2.' in lines[0] and 'publish one clock' in lines[0], lines[0]


def test_repeated_clock_jumps_back_are_rate_limited(make_link, make_peer, caplog):
    # A simulation restarting every frame (each one 2 s back): one warning, not one per frame.
    logger = logging.getLogger('test.link.resets')
    link = make_link(StateSettings(pacing=GRID), fresh_timeout=2.0, logger=logger)
    peer = make_peer(link.address[1])
    start = 1000.0
    for k in range(5):
        feed(link, start + k * 0.001)
    peer.step()
    with caplog.at_level(logging.INFO, logger='test.link.resets'):
        for restart in range(1, 11):
            start -= 2.0
            for k in range(5):
                feed(link, start + k * 0.001)
            assert wait_for(lambda: link.state.resets == restart)
            peer.step(timeout=2.0)
    lines = [r.getMessage() for r in caplog.records if 'went back' in r.getMessage()]
    assert len(lines) == 1, f'{len(lines)} lines, first: {lines[:2]}'
    assert 'two clocks' not in caplog.text, caplog.text


def test_a_frame_whose_on_frame_failed_is_tried_again_when_sitl_resends_it():
    # A lock-step engine pushes the frame's sample in on_frame; its step fails once on frame 1.
    state = SensorState(StateSettings())
    calls: List[int] = []

    def on_frame(packet) -> None:
        calls.append(packet.frame_count)
        if calls == [0, 1]:
            raise RuntimeError('the physics blew up')
        state.push_odometry(OdometrySample(1.0 + packet.frame_count * 0.001, (0.0, 0.0, 0.0),
                                           (0.0, 0.0, 0.0), LEVEL, (0.0, 0.0, 0.0)))
        state.push_imu(ImuSample(1.0 + packet.frame_count * 0.001, (0.0, 0.0, 0.0),
                                 (0.0, 0.0, -9.80665)))

    quiet = logging.getLogger('test.link.failed_frame')
    quiet.setLevel(logging.CRITICAL)
    link = SitlLink(LinkSettings(port=free_udp_port(), fresh_timeout=0.05), state,
                    on_frame=on_frame, logger=quiet)
    sitl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sitl.bind(('127.0.0.1', 0))
    sitl.settimeout(5.0)
    try:
        replied = []
        for frame in (0, 1, 1, 2):          # SITL resends frame 1, left unanswered
            link.handle_datagram(encode_servo_packet(frame, [1500] * 16, 1000),
                                 sitl.getsockname())
            replied.append(link.stats.replied)
        assert calls == [0, 1, 1, 2]
        assert replied == [1, 1, 2, 3]
        stamps = [parse_reply(sitl.recv(65536), '4.7')['timestamp'] for _ in range(3)]
        assert stamps == pytest.approx([0.0, 0.001, 0.002], abs=1e-9)
    finally:
        sitl.close()
        link.stop()


def engine_instant(stamp: float) -> Instant:
    """Return a lock-step engine's frame as the instant it stepped to (hand-written values)."""
    return Instant(stamp=stamp, sequence=0, skipped=0, gyro=(0.125, -0.25, 0.5),
                   accel=(0.5, 0.25, -9.75), position=(1.0, 2.0, -3.0),
                   velocity=(0.125, 0.0, -0.5), quaternion=LEVEL, ranges=(), wind=None,
                   airspeed=None, battery=None, rc=None)


def stepping_engine(stamps):
    """on_frame of an engine whose frames reach each of stamps in turn."""
    stamps = iter(stamps)
    return lambda packet: engine_instant(next(stamps))


def test_an_engine_frame_is_answered_from_its_instant_then_pushed(make_link, make_peer):
    # The reply goes out before the state takes the frame: the pushing and bookkeeping
    # overlap SITL's turn instead of delaying the reply.
    link = make_link(on_frame=stepping_engine([5.0, 5.001, 5.002]))
    push, pushed = link.state.push_instant, []

    def push_instant(instant, served=False):
        replied = link.stats.replied
        sequence = push(instant, served)
        pushed.append((replied, served))
        return sequence

    link.state.push_instant = push_instant
    peer = make_peer(link.address[1])
    replies = [peer.step() for _ in range(3)]
    assert [r['timestamp'] for r in replies] == pytest.approx([0.0, 0.001, 0.002], abs=1e-9)
    assert replies[-1]['imu.gyro'] == (0.125, -0.25, 0.5)
    assert replies[-1]['imu.accel_body'] == (0.5, 0.25, -9.75)
    assert replies[-1]['position'] == (1.0, 2.0, -3.0)
    assert replies[-1]['velocity'] == (0.125, 0.0, -0.5)
    assert replies[-1]['quaternion'] == LEVEL
    assert wait_for(lambda: len(pushed) == 3)
    assert pushed == [(1, True), (2, True), (3, True)]  # each after its own reply was sent
    assert link.state.newest_primary() == 5.002
    assert link.state.meters['imu'].count == link.state.meters['odometry'].count == 3
    assert link.stats.unanswered == 0


def test_an_engine_frame_not_after_the_last_is_left_to_the_state(make_link, make_peer, caplog):
    # A repeated stamp has nothing new to serve; a stamp back (a reset) carries SITL's clock
    # on by the last step, as for any source: the state decides both, as before.
    link = make_link(on_frame=stepping_engine([5.0, 5.001, 5.001, 4.0]), fresh_timeout=0.1)
    peer = make_peer(link.address[1])
    peer.step(), peer.step()
    with pytest.raises(TimeoutError):
        peer.step(timeout=0.5)
    peer.frame_count += 1
    went_back = peer.step()
    assert went_back['timestamp'] == pytest.approx(0.002, abs=1e-9)
    assert 'no sample newer than the last reply' in caplog.text
    assert 'physics time went back from 5.001 to 4.000 s' in caplog.text
    assert wait_for(lambda: link.stats.replied == 3) and link.stats.unanswered == 1


def test_an_engine_frame_on_the_grid_is_left_to_the_state(make_link, make_peer):
    # Grid pacing answers SITL's own frame instants: the engine's instant is pushed, and
    # the grid's first instant served from the state.
    link = make_link(StateSettings(pacing=GRID), on_frame=stepping_engine([5.0]),
                     fresh_timeout=0.5)
    peer = make_peer(link.address[1])
    reply = peer.step()
    assert reply['timestamp'] == 0.0 and reply['position'] == (1.0, 2.0, -3.0)
    assert link.state.newest_primary() == 5.0


class GuessingEngine:
    """
    A lock-step engine by hand whose frames each move 1 ms on (position north = stamp).

    After each reply it steps ahead as if the PWM repeats; honest, it keeps that step for a
    frame that repeats the PWM; otherwise it returns some other instant (breaking the rule).
    """

    def __init__(self, honest: bool = True, airspeed: Optional[float] = None) -> None:
        self.stamp = 5.0
        self.guess = None
        self.honest = honest
        self.airspeed = airspeed
        self.fail_at: Optional[int] = None  # a frame_count whose on_frame raises

    def instant(self, stamp: float) -> Instant:
        return Instant(stamp=stamp, sequence=0, skipped=0, gyro=(0.125, -0.25, 0.5),
                       accel=(0.5, 0.25, -9.75), position=(stamp, 2.0, -3.0),
                       velocity=(0.125, 0.0, -0.5), quaternion=LEVEL, ranges=(), wind=None,
                       airspeed=self.airspeed, battery=None, rc=None)

    def on_frame(self, packet: ServoPacket) -> Instant:
        guess, self.guess = self.guess, None
        self.stamp += 0.001
        if packet.frame_count == self.fail_at:
            raise FloatingPointError('the checks choked')  # after keeping the guess
        if guess is not None and guess[0] == packet.pwm:
            return guess[1] if self.honest else self.instant(self.stamp + 1.0)
        return self.instant(self.stamp)

    def step_ahead(self, packet: ServoPacket) -> Instant:
        self.guess = (packet.pwm, self.instant(self.stamp + 0.001))
        return self.guess[1]


def test_a_frame_that_repeats_the_pwm_is_answered_on_arrival_with_the_step_ahead(make_link,
                                                                                 make_peer):
    engine = GuessingEngine()
    clock = SkippingClock()
    link = make_link(on_frame=engine.on_frame, clock=clock)
    link.step_ahead = engine.step_ahead
    peer = make_peer(link.address[1])
    pwm = [[1500] * 16] * 3 + [[1600] * 16] * 2 + [[1500] * 16]
    replies = [peer.step(pwm=p) for p in pwm]
    assert [r['timestamp'] for r in replies] == pytest.approx(
        [k / 1000 for k in range(6)], abs=1e-9)
    assert [r['position'][0] for r in replies] == pytest.approx(
        [5.001 + k / 1000 for k in range(6)], abs=1e-9)
    # Frames 1, 2 and 4 repeat the PWM before them; SITL resending frame 5 gets its reply.
    assert link.stats.answered_on_arrival == 3
    clock.skip(RESEND_INTERVAL)
    peer.send(frame_count=5, pwm=pwm[-1])
    assert parse_reply(peer.receive())['timestamp'] == pytest.approx(0.005, abs=1e-9)
    assert wait_for(lambda: link.stats.replied == link.stats.received == 7)
    # A stranger sending the very frame expected is not answered; the peer's is, on arrival.
    stranger = make_peer(link.address[1])
    stranger.send(frame_count=6, pwm=pwm[-1])
    assert stranger.receive(timeout=0.3) is None
    peer.frame_count = 6
    assert peer.step(pwm=pwm[-1])['timestamp'] == pytest.approx(0.006, abs=1e-9)
    assert wait_for(lambda: link.stats.answered_on_arrival == 4 and link.stats.strangers == 1)


@pytest.mark.parametrize('fault', ['rule broken', 'on_frame raised'])
def test_a_frame_answered_on_arrival_keeps_its_reply_whatever_its_handling_gives(
        make_link, make_peer, caplog, fault):
    # An engine returning another instant than its step ahead, or failing once it kept it:
    # one reply a frame, never a second or a wait, and SITL's resend gets the same bytes.
    engine = GuessingEngine(honest=fault != 'rule broken')
    engine.fail_at = 2 if fault == 'on_frame raised' else None
    clock = SkippingClock()
    link = make_link(on_frame=engine.on_frame, clock=clock)
    link.step_ahead = engine.step_ahead
    peer = make_peer(link.address[1])
    sent = []
    for frame in range(4):
        peer.send(frame_count=frame)
        sent.append(peer.receive())
    assert peer.receive(timeout=0.3) is None  # one reply a frame, never a second
    assert [parse_reply(r)['timestamp'] for r in sent] == pytest.approx(
        [0.0, 0.001, 0.002, 0.003], abs=1e-9)
    clock.skip(RESEND_INTERVAL)
    peer.send(frame_count=3)
    assert peer.receive() == sent[3]
    assert wait_for(lambda: link.stats.replied == link.stats.received == 5), link.stats
    # Frames 1 and 2 (rule broken: 1 and 3): no step ahead follows a frame whose handling
    # did not take its reply.
    assert link.stats.unanswered == 0 and link.stats.answered_on_arrival == 2
    if fault == 'rule broken':
        assert caplog.text.count('broke the rule of step_ahead') == 1
    else:
        assert 'frame 2: handing its PWM on failed' in caplog.text
        assert 'broke the rule' not in caplog.text


@pytest.mark.parametrize('world', ['stepped', 'failed'])
def test_a_frame_answered_on_arrival_then_held_gets_no_second_reply(make_link, make_peer,
                                                                    caplog, world):
    # An engine holding a frame whose reply went out on arrival (a fleet's world steps no
    # frame ahead; the rule is the link's): neither release() nor fail_held() may send
    # anything more, or SITL would read every later reply one frame late; and a failed world
    # does not make that frame unanswered, or wait for a resend SITL never sends.
    engine = GuessingEngine()
    held: List[Instant] = []

    def on_frame(packet: ServoPacket) -> object:
        answer = engine.on_frame(packet)
        if packet.frame_count == 2:
            held.append(answer)
            return HELD
        return answer

    link = make_link(on_frame=on_frame)
    link.step_ahead = engine.step_ahead
    peer = make_peer(link.address[1])
    assert [peer.step()['timestamp'] for _ in range(2)] == pytest.approx([0.0, 0.001])
    peer.send(frame_count=2)
    on_arrival = peer.receive()
    assert parse_reply(on_arrival)['timestamp'] == pytest.approx(0.002, abs=1e-9)
    assert wait_for(lambda: link.held)
    if world == 'stepped':
        link.release(held[0])
        link.bookkeep_released()
    else:
        link.fail_held('the world failed to step')
    assert peer.receive(timeout=0.3) is None
    assert link.session.replied_frame == 2 and link.stats.unanswered == 0
    peer.frame_count = 3
    assert peer.step()['timestamp'] == pytest.approx(0.003, abs=1e-9)
    assert wait_for(lambda: link.stats.replied == 4), link.stats
    # Released, frame 2's bookkeeping stepped frame 3 ahead; failed, nothing did.
    assert link.stats.answered_on_arrival == (3 if world == 'stepped' else 2)
    assert (caplog.text.count('frame 2: the world failed to step; it was answered on arrival, '
                              'and that reply stands') == (world == 'failed'))


def test_an_on_frame_answer_outside_the_contract_is_refused_in_one_line(make_link, make_peer,
                                                                        caplog):
    # Controls handed back (what an FDMData source's send_controls once returned) are not an
    # answer: said once, and the state answers each frame.
    link = make_link(on_frame=lambda packet: (0.5, -0.5, 0.0, 1.0))
    peer = make_peer(link.address[1])
    for frame in range(3):
        feed(link, 10.0 + frame / 1000)
        assert peer.step()['position'] == (1.0, 2.0, -3.0)
    assert caplog.text.count('on_frame returned tuple, not an Instant, HELD or None') == 1
    assert link.stats.unanswered == 0


def test_a_step_ahead_whose_reply_leaves_values_out_is_not_sent_on_arrival(
        make_link, make_peer, caplog):
    # Its reply is encoded when the frame is handled, which says what it leaves out.
    engine = GuessingEngine(airspeed=math.nan)
    link = make_link(on_frame=engine.on_frame)
    link.step_ahead = engine.step_ahead
    peer = make_peer(link.address[1])
    replies = [peer.step() for _ in range(4)]
    assert all('airspeed' not in r for r in replies)
    assert link.stats.answered_on_arrival == 0
    assert 'left out optional values that are not finite: airspeed' in caplog.text
