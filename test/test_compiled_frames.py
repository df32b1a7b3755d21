"""The compiled frame loop (sources/compiled_frames.py): the replies, faults and bookkeeping."""

from dataclasses import replace
import errno
import logging
import math
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest

pytest.importorskip('mujoco', reason='needs the mujoco package (pip install mujoco)')

from test_mujoco import held_pwm_frames  # noqa: E402, I100, I202

from ardupilot_json_bridge.checks.conventions import ConventionChecker  # noqa: E402
from ardupilot_json_bridge.cli import default_preset, load_config  # noqa: E402
from ardupilot_json_bridge.core.protocol import encode_servo_packet  # noqa: E402
from ardupilot_json_bridge.core.settings import LinkSettings, SAMPLES, StateSettings  # noqa: E402
from ardupilot_json_bridge.core.state import SensorState  # noqa: E402
from ardupilot_json_bridge.link.session import RESEND_MIN  # noqa: E402
from ardupilot_json_bridge.link.sitl_link import SitlLink  # noqa: E402
from ardupilot_json_bridge.sources import compiled_frames  # noqa: E402
from ardupilot_json_bridge.sources.compiled_frames import (  # noqa: E402
    compile_frames, CompiledFrames)
from ardupilot_json_bridge.sources.mujoco_source import MujocoLockStep  # noqa: E402
from ardupilot_json_bridge.sources.mujoco_vehicle import (  # noqa: E402
    MujocoVehicle, shipped_model)
from conftest import free_udp_port  # noqa: E402
from sitl_peer import SitlPeer  # noqa: E402

Frame = Tuple[int, List[int], int]
# What each way of serving is compared on, besides the replies.
COUNTERS = ('received', 'replied', 'new_frames', 'late', 'duplicates', 'resent', 'lost',
            'restarts', 'rejected', 'strangers', 'unanswered')


class Engine:
    """The MuJoCo quad in lock-step behind a link, its frames compiled or in Python."""

    def __init__(self, compiled: bool, vehicle: str = 'quad_x') -> None:
        path, shipped = shipped_model(vehicle)
        config = load_config(default_preset(shipped.preset), '', {})
        self.vehicle = MujocoVehicle(path)
        self.state = SensorState(StateSettings(pacing=SAMPLES))
        self.checker = ConventionChecker(window=10.0)
        self.source = MujocoLockStep(self.vehicle, self.state, config.outputs,
                                     checker=self.checker)
        self.link = SitlLink(LinkSettings(port=free_udp_port(), fresh_timeout=1.0), self.state,
                             on_frame=self.source.on_frame, on_restart=self.source.on_restart,
                             after_reply=self.source.after_reply)
        self.blocker = compile_frames([self.link], [self.source]) if compiled else 'not asked'
        self.link.start()

    def stop(self) -> None:
        self.link.stop()
        self.source.close()

    def counters(self) -> Dict[str, int]:
        return {name: getattr(self.link.stats, name) for name in COUNTERS}


def fly(engine: Engine, frames: List[Frame], interlopers: Dict[int, bytes] = {},
        stranger: Optional[SitlPeer] = None) -> List[Optional[bytes]]:
    """Send each frame as SITL would, read one datagram as its reply; interlopers first."""
    peer = SitlPeer(engine.link.address[1])
    replies = []
    try:
        last = None
        for index, (frame_count, pwm, rate) in enumerate(frames):
            if index in interlopers:
                (stranger or peer).send_raw(interlopers[index])
                time.sleep(0.05)  # it arrives before the frame does
            if last is not None and frame_count <= last:
                time.sleep(RESEND_MIN)    # SITL resends after 1.1 s, restarts slower
            last = frame_count
            peer.send_raw(encode_servo_packet(frame_count, pwm, rate))
            replies.append(peer.receive())
    finally:
        peer.close()
        engine.stop()
    return replies


def stepped(engine: Engine, count: int, pwm: List[int]) -> List[Dict[str, object]]:
    """Step count frames against engine as SITL does (one datagram a frame); then stop it."""
    peer = SitlPeer(engine.link.address[1])
    try:
        return [peer.step(pwm=pwm) for _ in range(count)]
    finally:
        peer.close()
        engine.stop()


def test_the_compiled_loop_sends_the_replies_the_python_frame_sends():
    # The same packets, with repeated and changing PWM, a resent frame, a lost one, a change
    # of frame rate and a SITL restart, to the engine serving frames in Python and to the
    # compiled loop: the same bytes frame for frame, the same checks' frames, the same counts.
    frames = held_pwm_frames(4)
    engines = {compiled: Engine(compiled) for compiled in (False, True)}
    assert engines[True].blocker is None
    replies = {compiled: fly(engine, frames) for compiled, engine in engines.items()}
    assert None not in replies[True]
    assert replies[True] == replies[False]
    python, compiled = engines[False], engines[True]
    assert list(compiled.checker._frames) == list(python.checker._frames)
    assert compiled.counters() == python.counters()
    assert compiled.counters()['resent'] == compiled.counters()['restarts'] == 1
    # Every plain frame was the loop's: all but each session's first, the resend, the frame
    # after the lost one and the first at each new frame rate.
    assert compiled.link.compiled.served == len(frames) - 6
    assert compiled.source.frames == python.source.frames
    assert compiled.vehicle.steps == python.vehicle.steps
    assert compiled.vehicle.time == python.vehicle.time
    meters = {engine: {name: (meter.count, meter.used, meter.missed)
                       for name, meter in engine.state.meters.items()}
              for engine in (python, compiled)}
    assert meters[compiled] == meters[python]
    for name, meter in compiled.state.meters.items():
        assert meter.stamp_step == pytest.approx(python.state.meters[name].stamp_step), name
    # Bookkept a batch at a time, the session and the latencies still see every frame.
    sessions = {engine: (engine.link.session.last_step, engine.link.session.last_timestamp,
                         engine.link.session.replied_frame, engine.link.session.last_reply)
                for engine in (python, compiled)}
    assert sessions[compiled] == sessions[python]
    assert compiled.link.stats.latency._filled == python.link.stats.latency._filled > 0


@pytest.mark.parametrize('kind', ['stranger', 'garbage', 'late', 'copy', 'json'])
def test_a_datagram_the_loop_cannot_serve_goes_to_the_link_as_in_python(kind):
    # Mid-session datagrams the loop hands back: told and counted as the Python link tells
    # them, and no reply the Python link would not send (SITL reads one datagram a frame).
    frames = [(k, [1500 + 10 * (k // 3)] * 4 + [1000] * 12, 1200) for k in range(60)]
    data = {'stranger': encode_servo_packet(31, frames[31][1]),
            'garbage': b'\x00' * 7, 'late': encode_servo_packet(12, frames[12][1]),
            'copy': encode_servo_packet(29, frames[29][1]),
            'json': b'\n{"timestamp":0}\n'}[kind]
    results = {}
    for compiled in (False, True):
        engine = Engine(compiled)
        stranger = SitlPeer(engine.link.address[1]) if kind == 'stranger' else None
        try:
            replies = fly(engine, frames, {30: data}, stranger)
        finally:
            if stranger is not None:
                stranger.close()
        results[compiled] = (replies, engine.counters())
    assert results[True] == results[False]
    replies, counters = results[True]
    assert None not in replies and len(set(replies)) == len(frames)
    expected = {'stranger': 'strangers', 'garbage': 'rejected', 'late': 'late',
                'copy': 'duplicates', 'json': 'rejected'}[kind]
    assert counters[expected] == 1, counters


def test_the_loop_serves_each_frame_a_reply_sitl_accepts_from_its_own_physics():
    # A SITL peer (one datagram a frame, its own frame rate from the timestamps) at full
    # throttle: the quad climbs, each reply one frame period on, and the loop served them.
    engine = Engine(True)
    replies = stepped(engine, 1200, [1750] * 4 + [1000] * 12)
    stamps = np.array([reply['timestamp'] for reply in replies])
    assert stamps[0] == 0.0
    assert np.allclose(np.diff(stamps), 1 / 1200, rtol=0, atol=1e-12)
    heights = [-reply['position'][2] for reply in replies]
    assert heights[-1] > heights[0] + 0.5, heights[-1]
    assert engine.link.compiled.served == 1199
    assert engine.link.stats.replied == 1200 and engine.link.stats.unanswered == 0


def test_a_divergence_in_the_loop_is_named_and_its_clock_carries_on(caplog, tmp_path,
                                                                    monkeypatch):
    # MuJoCo resets a diverged world to its start and to time 0 inside the loop's step: the
    # hook says so in Python's words, and the clock goes on one frame a frame.
    import mujoco
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT to the working directory
    engine = Engine(True)
    vehicle = engine.vehicle
    peer = SitlPeer(engine.link.address[1])
    try:
        replies = [peer.step(pwm=[1750] * 4 + [1000] * 12) for _ in range(300)]
        ground = replies[0]['position'][2]
        assert replies[-1]['position'][2] < ground - 0.05  # it climbed
        clock = vehicle.time
        vehicle.data.qvel[2] = math.nan  # between frames, with the forward pass MuJoCo asks
        mujoco.mj_forward(vehicle.model, vehicle.data)
        with caplog.at_level(logging.INFO):
            replies += [peer.step(pwm=[1750] * 4 + [1000] * 12) for _ in range(2)]
    finally:
        peer.close()
        engine.stop()
    assert replies[-2]['position'][2] == pytest.approx(ground, abs=0.01)
    assert vehicle.time == pytest.approx(clock + 2 / 1200, abs=1e-9)
    assert np.allclose(np.diff([r['timestamp'] for r in replies]), 1 / 1200, atol=1e-9)
    assert vehicle.divergences == 1
    assert 'MuJoCo diverged (' in caplog.text, caplog.text
    assert engine.link.compiled.served == 301


def test_a_stranger_after_peer_timeout_does_not_take_the_port_of_a_sitl_served_in_c():
    # The locked SITL is heard through the frames the loop serves: a stranger's packet after
    # more than peer_timeout of serving is a stranger's, not "SITL moved".
    engine = Engine(True)
    engine.link.settings = replace(engine.link.settings, peer_timeout=0.3)
    peer, stranger = SitlPeer(engine.link.address[1]), SitlPeer(engine.link.address[1])
    try:
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            peer.step(pwm=[1500] * 16)
        stranger.send(frame_count=5, pwm=[1500] * 16)
        assert stranger.receive(timeout=0.3) is None
        replies = [peer.step(pwm=[1500] * 16) for _ in range(10)]
    finally:
        peer.close()
        stranger.close()
        engine.stop()
    assert len(replies) == 10
    assert engine.link.stats.strangers == 1 and engine.link.stats.restarts == 0


def test_what_the_loop_cannot_serve_is_said_and_served_in_python(caplog):
    # The plane's wing is a force model stepped in Python: its frames stay Python's.
    engine = Engine(True, 'plane')
    engine.stop()
    assert engine.blocker is not None and 'force model' in engine.blocker
    assert engine.link.compiled is None


def test_a_loop_the_system_cannot_start_leaves_the_frames_to_python(monkeypatch):
    # FrameLoop raises OSError where the system refuses its timed wait's clock.
    def refused(*args: object) -> None:
        raise OSError(errno.EINVAL, 'Invalid argument')
    monkeypatch.setattr(compiled_frames._frame, 'FrameLoop', refused)
    engine = Engine(True)
    assert engine.blocker == ('the compiled frame loop could not start ([Errno 22] Invalid '
                              'argument)')
    assert engine.link.compiled is None
    replies = stepped(engine, 5, [1500] * 16)
    assert [reply['timestamp'] for reply in replies] == sorted(
        {reply['timestamp'] for reply in replies})
    assert engine.link.stats.replied == 5


def test_the_replies_read_back_to_mujocos_own_state_in_ardupilot_conventions():
    # A reply against MuJoCo's own arrays (not the compiled reader), converted here by hand:
    # NED position and velocity, FRD rates and specific force, and the attitude of the FLU
    # body in ENU (qpos, w first) as FRD in NED, by scipy.
    engine = Engine(True)
    peer = SitlPeer(engine.link.address[1])
    data = engine.vehicle.data
    try:
        for _ in range(400):
            reply = peer.step(pwm=[1800, 1700, 1750, 1650] + [1000] * 12)
        assert engine.link.compiled.settle()
        qpos, qvel, sensors = data.qpos.copy(), data.qvel.copy(), data.sensordata.copy()
    finally:
        peer.close()
        engine.stop()
    x, y, z = qpos[:3]
    assert reply['position'] == pytest.approx((y, x, -z), abs=1e-12)
    vx, vy, vz = qvel[:3]
    assert reply['velocity'] == pytest.approx((vy, vx, -vz), rel=1e-6, abs=1e-6)
    assert max(map(abs, reply['imu.gyro'])) > 0.01  # it turns: the signs below are seen
    p, q, r = sensors[:3]  # the gyro, then the accelerometer (quad_x.xml)
    assert reply['imu.gyro'] == pytest.approx((p, -q, -r), rel=1e-6, abs=1e-6)
    fx, fy, fz = sensors[3:6]
    assert reply['imu.accel_body'] == pytest.approx((fx, -fy, -fz), rel=1e-6, abs=1e-6)
    from scipy.spatial.transform import Rotation
    enu_flu = Rotation.from_quat([*qpos[4:7], qpos[3]])
    ned_enu = Rotation.from_matrix([[0, 1, 0], [1, 0, 0], [0, 0, -1]])
    flu_frd = Rotation.from_matrix([[1, 0, 0], [0, -1, 0], [0, 0, -1]])
    w, qx, qy, qz = reply['quaternion']
    sent = Rotation.from_quat([qx, qy, qz, w])
    expected = ned_enu * enu_flu * flu_frd
    assert (sent.inv() * expected).magnitude() < 1e-6


def test_a_compiled_fleet_whose_sitls_all_stop_sleeps_until_one_sends():
    # Every SITL silent (paused, stopped): the world holds nothing, and the serving thread
    # waits on the sockets; it does not go round serving nothing.
    from test_mujoco_fleet import Fleet, FULL
    fleet = Fleet(compiled=True)
    rounds = []
    step = fleet.server._step
    fleet.server._step = lambda: (rounds.append(1), step())[1]
    try:
        for _ in range(20):
            fleet.step({0: FULL, 1: FULL})
        before = len(rounds)
        time.sleep(1.0)
        idle = len(rounds) - before
        replies = fleet.step({0: FULL, 1: FULL})
    finally:
        fleet.close()
    assert idle < 5, idle
    assert sorted(replies) == [0, 1]


def test_a_stopped_engine_is_freed_with_its_compiled_loop():
    import gc
    import weakref
    engine = Engine(True)
    stepped(engine, 50, [1500] * 16)
    vehicle, frames = weakref.ref(engine.vehicle), weakref.ref(engine.link.compiled)
    del engine
    gc.collect()
    assert vehicle() is None and frames() is None


def test_a_signal_to_the_serving_thread_is_no_receive_failure(caplog):
    # The loop's blocking receive, interrupted by a signal with a Python handler, carries on
    # (Python's own sockets retry on EINTR).
    import signal
    import threading
    caught = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: caught.append(1))
    engine = Engine(True)
    peer = SitlPeer(engine.link.address[1])
    try:
        replies = [peer.step(pwm=[1500] * 16) for _ in range(20)]
        for _ in range(5):
            signal.pthread_kill(engine.link._thread.ident, signal.SIGUSR1)
            time.sleep(0.02)
        replies += [peer.step(pwm=[1500] * 16) for _ in range(20)]
        serving = [t for t in threading.enumerate() if t is engine.link._thread]
    finally:
        peer.close()
        engine.stop()
        signal.signal(signal.SIGUSR1, previous)
    assert len(replies) == 40 and serving
    assert 'receive failed' not in caplog.text, caplog.text
    assert engine.link.compiled.served >= 38


def test_the_bookkeeping_takes_frames_in_batches_not_one_by_one():
    # A SITL stepping as fast as it can: the frames go to the bookkeeping a batch at a time
    # (when 2 ms old, or 32 of them), not each on its own (a wake-up and a pass of Python a
    # frame).
    engine = Engine(True)
    stepped(engine, 1200, [1500] * 16)
    frames = engine.link.compiled
    assert frames.served == 1199
    assert frames.batches < frames.served / 3, (frames.batches, frames.served)


def test_a_slow_bookkeeping_never_gets_an_empty_batch(monkeypatch):
    # The bookkeeping slower than SITL: the loop fills a batch while the other is bookkept and
    # waits to hand it over, while the bookkeeping thread may hand it over itself once it is
    # old enough. Either way it goes once: no empty batch, no pass of the bookkeeping for one.
    sizes = []
    bookkeep = CompiledFrames._bookkeep

    def slow(self, batch):
        sizes.append(sum(served.frames for served in batch))
        time.sleep(0.02)  # a batch fills while the other is bookkept, and ages past 2 ms
        bookkeep(self, batch)

    monkeypatch.setattr(CompiledFrames, '_bookkeep', slow)
    engine = Engine(True)
    stepped(engine, 600, [1500] * 16)
    assert engine.link.compiled.served == 599
    assert sum(sizes) == 599 and 0 not in sizes, sorted(set(sizes))
