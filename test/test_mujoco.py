"""The MuJoCo engine: the quad X's physics signs, lock-step serving, and real ArduCopter."""

from contextlib import contextmanager
import math
import re
import signal
import subprocess
import sys
import time
from typing import Callable, Iterator, List, Optional

import numpy as np
import pytest

pytest.importorskip('mujoco', reason='needs the mujoco package (pip install mujoco)')

from ardupilot_json_bridge.checks.conventions import ConventionChecker  # noqa: E402
from ardupilot_json_bridge.checks.verdicts import format_table, OK, WRONG  # noqa: E402
from ardupilot_json_bridge.cli import default_preset, load_config, main  # noqa: E402
from ardupilot_json_bridge.core.protocol import encode_servo_packet  # noqa: E402
from ardupilot_json_bridge.core.settings import LinkSettings, SAMPLES, StateSettings  # noqa: E402
from ardupilot_json_bridge.core.state import SensorState  # noqa: E402
from ardupilot_json_bridge.link.session import RESEND_MIN  # noqa: E402
from ardupilot_json_bridge.link.sitl_link import SitlLink  # noqa: E402
from ardupilot_json_bridge.sources.compiled_frames import compile_frames  # noqa: E402
from ardupilot_json_bridge.sources.flight_recorder import FlightRecorder  # noqa: E402
from ardupilot_json_bridge.sources.mujoco_source import MujocoLockStep  # noqa: E402
from ardupilot_json_bridge.sources.mujoco_vehicle import (  # noqa: E402
    MujocoVehicle, shipped_model)
from ardupilot_json_bridge.sources.wind import Wind  # noqa: E402
from conftest import free_udp_port, motor_command, reaped  # noqa: E402
import sitl_flight  # noqa: E402
from sitl_peer import SitlPeer  # noqa: E402
from test_mujoco_plane import in_flight  # noqa: E402

HOVER_SPEED = math.sqrt(1.21 * 9.80665 / 4 / 1.6758e-5)


def fly_open_loop(speeds, seconds: float) -> MujocoVehicle:
    vehicle = MujocoVehicle()
    vehicle.set_rotor_speeds(speeds)
    vehicle.advance(seconds)
    return vehicle


def serving_link(source: MujocoLockStep, state: SensorState, fresh_timeout: float) -> SitlLink:
    """Start a link serving source with after_reply wired (not stepping ahead); return it."""
    link = SitlLink(LinkSettings(port=free_udp_port(), fresh_timeout=fresh_timeout), state,
                    on_frame=source.on_frame, on_restart=source.on_restart,
                    after_reply=source.after_reply)
    link.start()
    return link


def test_hover_speed_holds_the_vehicle_up():
    vehicle = fly_open_loop([HOVER_SPEED * 1.05] * 4, 0.6)
    rising = fly_open_loop([HOVER_SPEED * 1.05] * 4, 1.2).state()
    assert rising.position[2] > vehicle.state().position[2] > 0.07
    assert abs(rising.body_rates[2]) < 1e-6


def test_ccw_rotors_faster_turn_the_vehicle_clockwise_from_above():
    # ArduCopter yaws right (clockwise seen from above) by speeding up its CCW rotors 1 and 2.
    state = fly_open_loop([HOVER_SPEED * 1.1, HOVER_SPEED * 1.1, HOVER_SPEED * 0.95,
                           HOVER_SPEED * 0.95], 0.5).state()
    assert state.body_rates[2] < -0.05          # FLU z up: clockwise is negative
    assert abs(state.body_rates[0]) < 0.01 and abs(state.body_rates[1]) < 0.01


def test_front_right_rotor_out_falls_to_the_front_right():
    state = fly_open_loop([0.0, HOVER_SPEED * 1.1, HOVER_SPEED * 1.1, HOVER_SPEED * 1.1],
                          0.3).state()
    assert state.body_rates[0] > 0.1            # FLU roll about forward: right side down
    assert state.body_rates[1] > 0.1            # FLU pitch about left: nose down


def test_at_rest_the_imu_reads_gravitys_reaction():
    state = fly_open_loop([0.0] * 4, 0.5).state()
    assert state.specific_force == pytest.approx((0.0, 0.0, 9.80665), abs=1e-3)
    assert state.orientation == pytest.approx((0.0, 0.0, 0.0, 1.0), abs=1e-6)


@pytest.mark.parametrize('integrator', ['implicitfast', 'Euler', 'RK4'])
def test_a_frame_after_a_forward_pass_steps_as_mujocos_whole_step_would(integrator, tmp_path):
    # The split step (commands set between mj_step1, done by the last mj_forward, and
    # mj_step2) against mj_step from scratch every frame: the same flight, to the bit.
    # mj_step2 cannot integrate with RK4: an RK4 model must step whole every time.
    import mujoco
    from ardupilot_json_bridge.sources.mujoco_vehicle import DEFAULT_MODEL
    with open(DEFAULT_MODEL) as shipped:
        text = shipped.read()
    assert 'integrator="implicitfast"' in text
    path = tmp_path / 'quad_x.xml'
    path.write_text(text.replace('integrator="implicitfast"', f'integrator="{integrator}"'))
    split, whole = MujocoVehicle(str(path)), MujocoVehicle(str(path))
    # MuJoCo counts its forward passes: mj_step runs one, mj_step2 (the split step) none.
    forward = int(mujoco.mjtTimer.mjTIMER_FORWARD)
    for k in range(1200):
        speeds = [700.0 + 150.0 * math.sin(k / 90.0 + i) for i in range(4)]
        for vehicle in (split, whole):
            vehicle.set_rotor_speeds(speeds)
        whole.forwarded = False
        split.advance(1 / 1200)
        whole.advance(1 / 1200)
    passes = whole.data.timer[forward].number - split.data.timer[forward].number
    assert passes == (0 if integrator == 'RK4' else 1200)
    assert np.array_equal(split.data.qpos, whole.data.qpos)
    assert np.array_equal(split.data.sensordata, whole.data.sensordata)
    assert split.state().body_rates != (0.0, 0.0, 0.0)  # it turned: the commands acted


@contextmanager
def lock_step(**options) -> Iterator[tuple]:
    """Serve the quad X in lock-step to a test SITL peer: (vehicle, source, peer), then stop."""
    config = load_config(default_preset(), '', {})
    vehicle = MujocoVehicle()
    state = SensorState(StateSettings(pacing=SAMPLES))
    source = MujocoLockStep(vehicle, state, config.outputs[0], **options)
    link = SitlLink(LinkSettings(port=free_udp_port(), fresh_timeout=1.0), state,
                    on_frame=source.on_frame, on_restart=source.on_restart)
    link.start()
    peer = SitlPeer(link.address[1])
    try:
        yield vehicle, source, peer
    finally:
        peer.close()
        link.stop()


@pytest.mark.parametrize('reply_first', [False, True], ids=['lock-step', 'reply-first'])
def test_lock_step_steps_one_frame_per_new_packet_and_resets_on_restart(reply_first):
    checker = ConventionChecker(window=10.0)
    with lock_step(checker=checker, reply_first=reply_first) as (_, source, peer):
        replies = [peer.step(pwm=[1700] * 4 + [0] * 12) for _ in range(600)]
        # A copy of the frame just answered, too soon to be SITL's resend (RESEND_MIN): the
        # wire's, counted and not answered (SITL would take a second reply as the next frame's).
        peer.send(frame_count=peer.frame_count - 1, pwm=[1700] * 4 + [0] * 12)
        assert peer.receive(timeout=0.2) is None
        assert source.frames == 600                      # the duplicate did not step
        steps = np.diff([r['timestamp'] for r in replies])
        assert np.allclose(steps, 1 / 1200, atol=1e-9)
        # Full power for 0.5 s: climbing (NED down velocity negative), level.
        ground = replies[0]['position'][2]
        assert replies[-1]['velocity'][2] < -1.0 and replies[-1]['position'][2] < ground - 0.2
        # The live checks saw the climb as a ROS simulator would publish it.
        checks = {c.name: c for c in checker.checks()}
        assert checks['gravity'].verdict == OK, format_table(checks.values())
        assert not [c for c in checks.values() if c.verdict == WRONG], format_table(
            checks.values())
        # A restarted SITL boots for seconds; a frame 0 sooner than RESEND_MIN after the
        # session's first is a late copy of it, not a restart.
        time.sleep(RESEND_MIN)
        peer.frame_count = 0
        reply = peer.step(pwm=[1000] * 4 + [0] * 12)
        assert reply['timestamp'] == 0.0
        assert reply['position'][2] == pytest.approx(ground, abs=0.01)
        (restarted,) = checker.checks()  # the flight before the restart is forgotten
        assert restarted.measured.startswith('1 IMU and 1 odometry'), restarted


def test_a_diverged_simulation_is_named_and_its_clock_carries_on(caplog, tmp_path,
                                                                 monkeypatch):
    # MuJoCo resets a diverged world to its start and to time 0: the log blamed "a simulation
    # reset or looping bag" for the clock going back. (MuJoCo writes its MUJOCO_LOG.TXT to the
    # working directory: a temporary one.)
    monkeypatch.chdir(tmp_path)
    with lock_step() as (vehicle, _, peer):
        replies = [peer.step(pwm=[1700] * 4 + [0] * 12) for _ in range(300)]
        ground = replies[0]['position'][2]
        assert replies[-1]['position'][2] < ground - 0.05    # it climbed
        clock = vehicle.time
        # The next step diverges (changed between advances: forwarded cleared, as advances ask).
        vehicle.data.qvel[2] = math.nan
        vehicle.forwarded = False
        replies += [peer.step(pwm=[1700] * 4 + [0] * 12) for _ in range(2)]
    # Back at its start, as MuJoCo left it; the clock one frame on, not at 0.
    assert replies[-2]['position'][2] == pytest.approx(ground, abs=0.01)
    assert vehicle.time == pytest.approx(clock + 2 / 1200, abs=1e-9)
    assert np.allclose(np.diff([r['timestamp'] for r in replies]), 1 / 1200, atol=1e-9)
    assert vehicle.divergences == 1
    assert 'MuJoCo diverged (velocity not finite or huge at degree of freedom 2)' in \
        caplog.text, caplog.text
    assert 'went back' not in caplog.text, caplog.text


def test_reply_first_answers_each_frame_with_what_lock_step_answered_the_frame_before():
    # The same PWM sequence to both modes (the reply-first engine stepping after each reply,
    # as the mujoco command wires it); a SITL restart midway: back at rest in both.
    config = load_config(default_preset(), '', {})
    pwm = [[1750 + int(200 * math.sin(k / 40.0 + i)) for i in range(4)] + [1000] * 12
           for k in range(400)]
    replies = {}
    for reply_first in (False, True):
        state = SensorState(StateSettings(pacing=SAMPLES))
        source = MujocoLockStep(MujocoVehicle(), state, config.outputs[0],
                                reply_first=reply_first)
        link = serving_link(source, state, fresh_timeout=1.0)
        peer = SitlPeer(link.address[1])
        try:
            replies[reply_first] = [peer.step(pwm=p) for p in pwm[:300]]
            time.sleep(RESEND_MIN)   # SITL boots again for seconds (see the test above)
            peer.frame_count = 0
            replies[reply_first] += [peer.step(pwm=p) for p in pwm[300:]]
        finally:
            peer.close()
            link.stop()
    lock_step, reply_first = replies[False], replies[True]
    assert list(reply_first[0]['velocity']) == [0.0, 0.0, 0.0] != list(lock_step[0]['velocity'])
    for k in range(1, 300):
        for key in ('position', 'velocity', 'quaternion'):
            assert reply_first[k][key] == lock_step[k - 1][key], (k, key)
        assert reply_first[k]['timestamp'] == pytest.approx(k / 1200, abs=1e-9)
    # After the restart both start at rest again, time at 0, one frame apart after (the
    # reply-first vehicle rests a frame more: its restart instant had been pushed already).
    assert reply_first[300]['timestamp'] == lock_step[300]['timestamp'] == 0.0
    assert reply_first[300]['velocity'] == pytest.approx([0.0, 0.0, 0.0], abs=1e-2)
    assert lock_step[-1]['position'][2] < lock_step[300]['position'][2] - 0.01  # it climbed
    assert reply_first[-1]['position'] == pytest.approx(lock_step[-2]['position'], abs=1e-5)


@pytest.mark.parametrize('vehicle', ['quad_x', 'plane'])
def test_a_frame_answered_from_its_instant_is_the_reply_the_state_builds(vehicle):
    # The same PWM to an engine answered at once (the mujoco command's way) and to one whose
    # instant is pushed first and answered from the state, as any lock-step source is: the
    # same bytes, frame for frame, across a SITL restart; the plane's carry wind and airspeed.
    path, shipped = shipped_model(vehicle)
    config = load_config(default_preset(shipped.preset), '', {})
    channels = 4 if vehicle == 'quad_x' else 5
    pwm = [[1650 + int(150 * math.sin(k / 30.0 + i)) for i in range(channels)]
           + [1000] * (16 - channels) for k in range(240)]
    replies = {}
    for at_once in (True, False):
        model = MujocoVehicle(path)
        if model.aero is not None:
            in_flight(model)
            model.wind = Wind((3.0, -2.0, 0.0))
        state = SensorState(StateSettings(pacing=SAMPLES))
        source = MujocoLockStep(model, state, config.outputs)

        def pushed_first(packet, source=source, state=state) -> None:
            state.push_instant(source.on_frame(packet))

        link = SitlLink(LinkSettings(port=free_udp_port(), fresh_timeout=1.0), state,
                        on_frame=source.on_frame if at_once else pushed_first,
                        on_restart=source.on_restart, after_reply=source.after_reply)
        link.start()
        peer = SitlPeer(link.address[1])
        try:
            replies[at_once] = []
            for k, frame_pwm in enumerate(pwm):
                if k == 160:
                    time.sleep(RESEND_MIN)    # SITL restarts at frame 160, seconds later
                peer.frame_count = k if k < 160 else k - 160
                peer.send(pwm=frame_pwm)
                replies[at_once].append(peer.receive())
        finally:
            peer.close()
            link.stop()
    assert None not in replies[True]
    assert replies[True] == replies[False]
    if vehicle == 'plane':
        assert b'"airspeed":' in replies[True][-1] and b'"velocity_wind":' in replies[True][-1]


def held_pwm_frames(channels: int) -> list:
    """
    Return (frame_count, pwm, frame rate) of SITL packets as a flight sends them, and worse.

    PWM held for 3 frames (ArduCopter's 400 Hz loop at 1200 frames/s), with a frame sent
    twice, a frame lost, a stretch at another rate and a restart; written apart from the code.
    """
    frames = []
    for k in range(260):
        held = k // 3
        pwm = [1600 + int(150 * math.sin(held / 9.0 + i)) for i in range(channels)]
        frames.append((k, pwm + [1000] * (16 - channels), 1000 if 151 <= k < 181 else 1200))
    frames.insert(101, frames[100])          # SITL sends frame 100 again
    del frames[121]                          # frame 120 never arrives
    return frames[:200] + [(k, p, r) for k, (_, p, r) in enumerate(frames[200:])]  # restart


@pytest.mark.parametrize('vehicle', ['quad_x', 'plane'])
def test_stepping_ahead_sends_the_replies_lock_step_sends(vehicle):
    # The same packets to the engine stepping each frame once its packet is in, and to one
    # stepping ahead after each reply (the mujoco command's default): the same bytes, frame
    # for frame, through repeated and changing PWM, a resent frame, a lost one, a change of
    # frame rate and a SITL restart; the plane in gusts (a guess undone must undo them too).
    path, shipped = shipped_model(vehicle)
    config = load_config(default_preset(shipped.preset), '', {})
    frames = held_pwm_frames(4 if vehicle == 'quad_x' else 5)
    replies, sources, on_arrival = {}, {}, {}
    for ahead in (False, True):
        model = MujocoVehicle(path)
        if model.aero is not None:
            in_flight(model)
            model.wind = Wind((3.0, -2.0, 0.0), gust=1.5)
        state = SensorState(StateSettings(pacing=SAMPLES))
        source = sources[ahead] = MujocoLockStep(model, state, config.outputs,
                                                 checker=ConventionChecker(window=10.0))
        link = SitlLink(LinkSettings(port=free_udp_port(), fresh_timeout=1.0), state,
                        on_frame=source.on_frame, on_restart=source.on_restart,
                        after_reply=source.after_reply,
                        step_ahead=source.step_ahead if ahead else None)
        link.start()
        peer = SitlPeer(link.address[1])
        try:
            replies[ahead] = []
            last = None
            for frame_count, pwm, rate in frames:
                if last is not None and frame_count <= last:
                    time.sleep(RESEND_MIN)    # SITL resends after 1.1 s, restarts slower
                last = frame_count
                peer.send_raw(encode_servo_packet(frame_count, pwm, rate))
                replies[ahead].append(peer.receive())
        finally:
            peer.close()
            link.stop()
            source.close()
        on_arrival[ahead] = link.stats.answered_on_arrival
    assert None not in replies[True]
    assert replies[True] == replies[False]
    # The live checks were handed every frame, as stepped, the same way.
    assert list(sources[True].checker._frames) == list(sources[False].checker._frames)
    assert sources[False].kept_ahead == sources[False].went_back == 0
    # Every new frame repeating the PWM and rate of the new frame before it in its session
    # was answered from the guess; the others went back from it.
    repeats, before = 0, None
    for frame_count, pwm, rate in frames:
        if before is not None and frame_count == before[0]:
            continue                     # a resend: answered again, not stepped
        if before is not None and frame_count > before[0]:
            repeats += (pwm, rate) == before[1:]
        before = (frame_count, pwm, rate)
    kept, back = sources[True].kept_ahead, sources[True].went_back
    assert kept == repeats and back > 60, (kept, repeats, back)
    # Every step kept was answered on arrival (the frame after the lost one changed its PWM).
    assert on_arrival == {False: 0, True: kept}
    if vehicle == 'plane':
        winds = {re.search(rb'"velocity_wind":\[[^]]*\]', r).group() for r in replies[True]}
        assert len(winds) > 200  # the gusts changed every frame


def test_stepping_ahead_stops_while_the_pwm_changes_every_frame_and_starts_again():
    # At SIM_RATE_HZ 400 every frame has its own PWM: each guess would be stepped twice.
    # The share of frames repeating the one before, smoothed over 32 frames from 1, falls
    # below a half after 22 changing frames ((31/32)^22 = 0.497), and from about 0 rises
    # above it again after 22 repeating ones (1 - (31/32)^22 = 0.503): of the 99 frames
    # repeating the one before, the 77 after those 22 are answered from a guess.
    config = load_config(default_preset(), '', {})
    state = SensorState(StateSettings(pacing=SAMPLES))
    source = MujocoLockStep(MujocoVehicle(), state, config.outputs[0])
    link = SitlLink(LinkSettings(port=free_udp_port(), fresh_timeout=1.0), state,
                    on_frame=source.on_frame, after_reply=source.after_reply,
                    step_ahead=source.step_ahead)
    link.start()
    peer = SitlPeer(link.address[1])
    try:
        for k in range(300):
            peer.step(pwm=[1500 + k % 100] * 4 + [1000] * 12)
        # Not answered on arrival, each of those frames was handled before its reply.
        assert source.kept_ahead == 0 and source.went_back == 22
        for _ in range(100):
            peer.step(pwm=[1600] * 4 + [1000] * 12)
    finally:
        peer.close()
        link.stop()  # the last frame, answered on arrival, is handled after its reply
    assert source.went_back == 22 and source.kept_ahead == 77


@pytest.mark.parametrize('name', ['quad_x', 'plane'])
def test_a_step_ahead_undone_leaves_the_world_as_it_was_bit_for_bit(name):
    # Independent truth: a second vehicle stepping the same commands without guessing.
    path = shipped_model(name)[0]
    guessing, plain = MujocoVehicle(path), MujocoVehicle(path)
    count = guessing.actuator_count
    for vehicle in (guessing, plain):
        if vehicle.aero is not None:
            in_flight(vehicle)
            vehicle.wind = Wind((3.0, -2.0, 0.0), gust=1.5)
        vehicle.set_commands([HOVER_SPEED * 1.2] * count)
        vehicle.advance(0.2)
    for k in range(30):
        commands = [HOVER_SPEED * (1.0 + 0.05 * math.sin(k + i)) for i in range(count)]
        guessing.step_ahead(1 / 1200)
        if k % 2:
            guessing.go_back()
            assert guessing.state() == plain.state(), k
            guessing.set_commands(commands)
            plain.set_commands(commands)
            guessing.advance(1 / 1200)
        else:
            guessing.keep_ahead()
        plain.advance(1 / 1200)
        for field in ('time', 'qpos', 'qvel', 'qacc', 'qacc_warmstart', 'ctrl', 'xfrc_applied',
                      'sensordata', 'xpos', 'xquat', 'cacc', 'qfrc_constraint',
                      'actuator_force', 'ncon', 'nefc'):
            assert np.array_equal(getattr(guessing.data, field), getattr(plain.data, field)), \
                (k, field)
        assert np.array_equal(guessing.data.efc_force[:plain.data.nefc],
                              plain.data.efc_force[:plain.data.nefc]), k
        assert guessing.speeds == plain.speeds and guessing.steps == plain.steps
        assert guessing.state() == plain.state(), k


@pytest.mark.parametrize('failing, unanswered', [({5}, 0), ({5, 6}, 1)],
                         ids=['once', 'twice in a row'])
def test_reply_first_recovers_from_one_failed_step_at_the_next_frame(caplog, failing,
                                                                     unanswered):
    # The vehicle's 5th step (after frame 4's reply) raises: frame 5 is answered with the
    # vehicle as it is, at first ask, and every frame after it too. When frame 5's prime
    # fails as well (the 6th step), frame 5 goes unanswered once and SITL's resend of it
    # is answered.
    config = load_config(default_preset(), '', {})
    vehicle = MujocoVehicle()
    advance, calls = vehicle.advance, []

    def failing_once(duration: float) -> None:
        calls.append(duration)
        if len(calls) in failing:
            raise FloatingPointError(f'the {len(calls)}th step blew up')
        advance(duration)

    vehicle.advance = failing_once
    state = SensorState(StateSettings(pacing=SAMPLES))
    source = MujocoLockStep(vehicle, state, config.outputs[0], reply_first=True)
    link = serving_link(source, state, fresh_timeout=0.2)
    peer = SitlPeer(link.address[1])
    try:
        replies = peer.lock_step(40, [1700] * 4 + [1000] * 12, timeout=60.0)
    finally:
        peer.close()
        link.stop()
    assert len(replies) == 40
    assert link.stats.new_frames == 40
    assert link.stats.unanswered == unanswered, link.stats.summary()
    assert link.stats.received == 40 + unanswered, link.stats.summary()
    assert 'stepping frame 4 failed (the 5th step blew up); the next frame is answered ' \
        'with the vehicle as it is' in caplog.text
    stamps = [r['timestamp'] for r in replies]
    assert all(b > a for a, b in zip(stamps, stamps[1:])), stamps


class ListRecorder:
    """Keeps what a recorder is handed: (physics frame, PWM) per recorded state."""

    def __init__(self) -> None:
        self.frames = []

    def add(self, state, pwm, commands, vehicle: int = 0) -> None:
        self.frames.append((round(state.time * 1200), tuple(pwm)))

    def close(self) -> None:
        pass


@pytest.mark.parametrize('reply_first', [False, True], ids=['lock-step', 'reply-first'])
def test_the_recording_holds_every_state_replied_with_and_the_pwm_that_made_it(reply_first):
    config = load_config(default_preset(), '', {})
    state = SensorState(StateSettings(pacing=SAMPLES))
    recorder = ListRecorder()
    source = MujocoLockStep(MujocoVehicle(), state, config.outputs[0], recorder=recorder,
                            reply_first=reply_first)
    link = serving_link(source, state, fresh_timeout=1.0)
    peer = SitlPeer(link.address[1])
    pwms = [tuple([1600 + 10 * k] * 4 + [1000] * 12) for k in range(4)]
    try:
        replies = [peer.step(pwm=pwm) for pwm in pwms]
    finally:
        peer.close()
        link.stop()
        source.close()
    assert [round(r['timestamp'] * 1200) for r in replies] == [0, 1, 2, 3]  # from the first
    if reply_first:
        # Frame k answered with physics frame k, made by frame k - 1's PWM (the first: none).
        assert recorder.frames == [(0, ())] + list(zip([1, 2, 3], pwms[:3]))
    else:
        # Frame k answered with physics frame k + 1, made by its own PWM.
        assert recorder.frames == list(zip([1, 2, 3, 4], pwms))


def read_bag(path) -> dict:
    """Topic -> (type, [(log time ns, message)]), read with rosbags itself."""
    from pathlib import Path

    from rosbags.highlevel import AnyReader
    topics = {}
    with AnyReader([Path(path)]) as reader:
        for connection, log_time, raw in reader.messages():
            entry = topics.setdefault(connection.topic, (connection.msgtype, []))
            entry[1].append((log_time, reader.deserialize(raw, connection.msgtype)))
    return topics


def test_a_recorded_lock_step_flight_is_a_bag_of_ros_topics_that_check_accepts(
        tmp_path, capsys):
    pytest.importorskip('rosbags', reason='recording needs rosbags')
    config = load_config(default_preset(), '', {})
    vehicle = MujocoVehicle()
    state = SensorState(StateSettings(pacing=SAMPLES))
    recorder = FlightRecorder(str(tmp_path / 'flight'))
    source = MujocoLockStep(vehicle, state, config.outputs[0], recorder=recorder)
    link = SitlLink(LinkSettings(port=free_udp_port(), fresh_timeout=1.0), state,
                    on_frame=source.on_frame, on_restart=source.on_restart)
    link.start()
    peer = SitlPeer(link.address[1])
    # Climb, then roll, pitch and yaw together: front right and back left rotors slower.
    pwms = [[1700] * 4] * 600 + [[1620, 1700, 1700, 1620]] * 900
    try:
        for pwm in pwms:
            peer.step(pwm=pwm + [0] * 12)
    finally:
        peer.close()
        link.stop()
        source.close()
    final = vehicle.state()
    topics = read_bag(tmp_path / 'flight')
    assert {topic: msgtype for topic, (msgtype, _) in topics.items()} == {
        '/clock': 'rosgraph_msgs/msg/Clock', '/imu': 'sensor_msgs/msg/Imu',
        '/odom': 'nav_msgs/msg/Odometry', '/servo_pwm': 'sensor_msgs/msg/JointState',
        '/command/motor_speed': 'std_msgs/msg/Float64MultiArray'}
    imus = [message for _, message in topics['/imu'][1]]
    odometry = [message for _, message in topics['/odom'][1]]
    assert len(imus) == len(topics['/clock'][1]) == len(topics['/servo_pwm'][1]) == 1500
    assert len(odometry) == 375                         # every fourth frame
    # Frame k ends at k / 1200 s of physics: stamps, clocks and log times agree.
    for k, ((log_time, imu), (_, clock)) in enumerate(zip(topics['/imu'][1],
                                                          topics['/clock'][1]), start=1):
        expected = round(k * 1e9 / 1200)
        assert log_time == expected
        assert imu.header.stamp.sec * 10**9 + imu.header.stamp.nanosec == expected
        assert clock.clock.sec * 10**9 + clock.clock.nanosec == expected
    pwm_values = [list(message.position) for _, message in topics['/servo_pwm'][1]]
    assert [values[:4] for values in pwm_values] == pwms
    # Each frame's PWM stamped with the physics time of the step it moved, as its IMU.
    assert [m.header.stamp for _, m in topics['/servo_pwm'][1]] == \
        [m.header.stamp for m in imus]
    commands = [list(message.data) for _, message in topics['/command/motor_speed'][1]]
    assert commands[-1] == pytest.approx([motor_command(pwm) for pwm in pwms[-1]])
    last = imus[-1]
    assert (last.linear_acceleration.x, last.linear_acceleration.y,
            last.linear_acceleration.z) == pytest.approx(final.specific_force)
    # ENU: the climb is up, z growing.
    assert odometry[-1].pose.pose.position.z > odometry[0].pose.pose.position.z + 0.2
    capsys.readouterr()
    assert main(['check', str(tmp_path / 'flight')]) == 0
    table = capsys.readouterr().out
    rows = [re.split(r'\s{2,}', line) for line in table.splitlines()[1:]]
    # The layout check needs 3 s of flight: this one leaves it undecided.
    assert [r[1] for r in rows if r[0] == 'layout: what SITL mixes for'] == ['undecided'], table
    verdicts = [r[1] for r in rows if r[0] != 'layout: what SITL mixes for']
    assert len(verdicts) == 13 and set(verdicts) == {'ok'}, table


def test_a_recording_that_cannot_be_written_says_so_and_the_flight_goes_on(tmp_path, caplog):
    pytest.importorskip('rosbags', reason='recording needs rosbags')
    (tmp_path / 'a_file').write_text('')
    recorder = FlightRecorder(str(tmp_path / 'a_file' / 'flight'))
    vehicle = MujocoVehicle()
    for _ in range(300):
        vehicle.advance(1 / 1200)
        recorder.add(vehicle.state(), [1500] * 16, [400.0] * 4)
    recorder.close()
    assert recorder.failed and f'recording to {tmp_path}/a_file/flight stopped' in caplog.text
    assert 'recorded' not in caplog.text


def test_the_mujoco_command_records_until_it_is_stopped(tmp_path):
    pytest.importorskip('rosbags', reason='recording needs rosbags')
    port, bag = free_udp_port(), tmp_path / 'flight'
    command = [sys.executable, '-m', 'ardupilot_json_bridge.cli', 'mujoco', '--record',
               str(bag), '--port', str(port)]
    with reaped(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)) as process:
        peer = SitlPeer(port)
        try:
            replies = peer.lock_step(600, [1600] * 4 + [1000] * 12, timeout=30.0)
        finally:
            peer.close()
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    assert len(replies) == 600 and process.returncode == 0, output
    assert f'recorded 600 frames (0.5 s of flight) to {bag}' in output
    topics = read_bag(bag)
    assert len(topics['/imu'][1]) == 600 and len(topics['/odom'][1]) == 150
    assert 'Traceback' not in output


def test_recording_over_an_existing_path_is_refused_before_anything_starts(tmp_path, caplog):
    pytest.importorskip('rosbags', reason='recording needs rosbags')
    (tmp_path / 'taken').mkdir()
    port = free_udp_port()
    assert main(['mujoco', '--record', str(tmp_path / 'taken'), '--port', str(port)]) == 2
    assert 'taken exists; name a new directory for the bag' in caplog.text


def test_the_mujoco_command_shortens_the_gil_switch_interval_while_it_serves(monkeypatch):
    # Python's default (5 ms) would let the checks' judge hold SITL's reply back for frames.
    import ardupilot_json_bridge.cli as cli
    seen = []
    monkeypatch.setattr(cli, 'serve', lambda *args: seen.append(sys.getswitchinterval()) or 0)
    default = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        assert main(['mujoco', '--port', str(free_udp_port())]) == 0
        assert seen == [pytest.approx(1e-4, rel=1e-6)]
        assert sys.getswitchinterval() == pytest.approx(0.005, rel=1e-6)  # restored after
        # A refused command changes nothing.
        assert main(['mujoco', '--vehicles', '2', '--reply-first']) == 2
        assert sys.getswitchinterval() == pytest.approx(0.005, rel=1e-6)
    finally:
        sys.setswitchinterval(default)


def test_reply_first_is_refused_for_a_fleet_before_anything_starts(caplog):
    assert main(['mujoco', '--vehicles', '2', '--reply-first']) == 2
    assert '--reply-first serves one vehicle' in caplog.text


@contextmanager
def lock_step_engine(instance: int, checker: Optional[ConventionChecker] = None,
                     recording: Optional[str] = None, reply_first: bool = False,
                     step_ahead: bool = False, port: int = 0,
                     served: Optional[List[SitlLink]] = None,
                     compiled: bool = False) -> Iterator[Callable[[], float]]:
    """
    Serve SITL instance from the MuJoCo quad in lock-step; yield its height above start.

    Reply-first steps after each reply, wired as the mujoco command wires it; so does
    stepping ahead; compiled: plain frames served by the compiled frame loop (the command's
    default). port: listen there, not on the instance's port; served, a list, gets the link
    (for its counters).
    """
    config = load_config(default_preset(), '', {'port': port, 'instance': instance})
    vehicle = MujocoVehicle()
    state = SensorState(StateSettings(pacing=SAMPLES))
    source = MujocoLockStep(vehicle, state, config.outputs[0], checker=checker,
                            recorder=FlightRecorder(recording) if recording else None,
                            reply_first=reply_first)
    link = SitlLink(config.link, state, on_frame=source.on_frame, on_restart=source.on_restart,
                    after_reply=source.after_reply if reply_first or step_ahead else None,
                    step_ahead=source.step_ahead if step_ahead else None)
    if compiled:
        assert compile_frames([link], [source]) is None
    link.start()
    if served is not None:
        served.append(link)
    start = vehicle.state().position[2]
    try:
        yield lambda: vehicle.state().position[2] - start
    finally:
        link.stop()
        source.close()


@pytest.mark.skipif(sitl_flight.sitl_binary() is None,
                    reason=f'real ArduCopter: set {sitl_flight.SITL_DIR_VARIABLE} to a folder '
                           'with arducopter and copter.parm')
@pytest.mark.parametrize('mode', ['lock-step', 'step-ahead', 'reply-first', 'compiled'])
def test_real_arducopter_flies_the_mujoco_quad_in_lock_step(tmp_path, capsys, mode):
    pytest.importorskip('rosbags', reason='the flight is recorded and checked as a bag: needs '
                                          "rosbags (pip install '.[test]')")
    checker = ConventionChecker(window=10.0)
    recording = str(tmp_path / 'flight')
    served: List[SitlLink] = []
    with lock_step_engine(3, checker, recording, mode == 'reply-first',
                          mode == 'step-ahead', served=served,
                          compiled=mode == 'compiled') as height, \
            sitl_flight.Sitl(instance=3, speedup=2) as sitl:
        record = sitl_flight.fly(sitl, 5.0, 5.0, height, leg=5.0)
        log = sitl.log()
    assert record.frame == 'Frame: QUAD/X', record.texts
    assert record.armed and record.reached, (record.texts, sitl_flight.tail(log))
    assert record.sim_seconds >= 5.0
    assert record.worst_hover_error(5.0) < 0.5, record.hover[-5:]
    assert record.worst_truth_error() < 0.5, record.hover[-5:]
    assert record.moved and record.landed, record.texts
    if mode == 'compiled':  # flown by the compiled loop, bar each session's first frame
        assert served[0].compiled.served >= served[0].stats.new_frames - 2
    checks = checker.checks()
    print(f"\nconventions over the flight's last 10 s:\n{format_table(checks)}")
    assert not [c for c in checks if c.verdict == WRONG], format_table(checks)
    print(f'lock-step flight: {record.sim_seconds:.1f} s of hover in {record.wall_seconds:.1f} s; '
          f'hover error {record.worst_hover_error(5.0):.3f} m, against MuJoCo '
          f'{record.worst_truth_error():.3f} m')
    # The recording of the whole flight, judged as a bag: nothing wrong, the clock ok.
    capsys.readouterr()
    assert main(['check', recording]) == 0
    table = capsys.readouterr().out
    with capsys.disabled():
        print(f'\nthe recorded flight, checked:\n{table}')
    for name in ('gravity', 'imu mounting', 'twist frame', 'time: stamps against the clock'):
        assert re.search(rf'^{name}\s+ok', table, re.MULTILINE), table


@pytest.mark.skipif(sitl_flight.sitl_binary() is None,
                    reason=f'real ArduCopter: set {sitl_flight.SITL_DIR_VARIABLE} to a folder '
                           'with arducopter and copter.parm')
def test_a_sitl_that_dies_mid_flight_ends_the_flight_at_once_in_a_few_lines(capfd):
    # SITL aborts while hovering (as on "Floating point exception - aborting"): the flight must
    # end with SITL's exit status and last lines, not print "EOF on TCP socket" for ever.
    killed = []
    with lock_step_engine(4) as height, sitl_flight.Sitl(instance=4, speedup=2) as sitl:

        def abort_sitl() -> float:
            if not killed:
                sitl.process.send_signal(signal.SIGABRT)
                killed.append(time.monotonic())
            return height()

        with pytest.raises(sitl_flight.SitlDied) as failure:
            sitl_flight.fly(sitl, 2.0, 5.0, abort_sitl)
        ended = time.monotonic()
    message = str(failure.value)
    output = capfd.readouterr()
    assert killed, message
    assert 'exited with status -6 (SIGABRT)' in message, message
    assert len(message.splitlines()) <= sitl_flight.TAIL_LINES + 2, message
    assert ended - killed[0] < 10.0
    printed = output.out + output.err
    assert 'EOF on TCP socket' not in printed and len(printed.splitlines()) < 50, printed[-2000:]
