"""A fleet in one MuJoCo world: the lock-step rules with test SITL peers, and real ArduCopters."""

import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List, Sequence

import pytest

pytest.importorskip('mujoco', reason='needs the mujoco package (pip install mujoco)')

from test_mujoco import read_bag  # noqa: E402, I100, I202

from ardupilot_json_bridge.cli import default_preset, load_config  # noqa: E402
from ardupilot_json_bridge.core.settings import (  # noqa: E402
    LinkSettings, SAMPLES, sitl_port, StateSettings)
from ardupilot_json_bridge.core.state import SensorState  # noqa: E402
from ardupilot_json_bridge.link.fleet_server import FleetServer  # noqa: E402
from ardupilot_json_bridge.link.sitl_link import SitlLink  # noqa: E402
from ardupilot_json_bridge.sources.compiled_frames import compile_frames  # noqa: E402
from ardupilot_json_bridge.sources.mujoco_fleet import FleetWorld  # noqa: E402
from ardupilot_json_bridge.sources.mujoco_source import MujocoLockStep  # noqa: E402
from ardupilot_json_bridge.sources.mujoco_vehicle import (  # noqa: E402
    DEFAULT_MODEL, load_world, MujocoVehicle)
from conftest import free_udp_port, reaped  # noqa: E402
import fleet_flight  # noqa: E402
import sitl_flight  # noqa: E402
from sitl_peer import parse_reply, RESEND_INTERVAL, SitlPeer  # noqa: E402

# By hand from quad_x.xml and the fleet's layout: the body starts 0.07 m up, copies 2 m north.
START_HEIGHT = 0.07
SPACING = 2.0
FULL = [1900] * 4 + [0] * 12
IDLE = [1000] * 4 + [0] * 12
# The defaults, as the mujoco command has them.
HOLD_TIMEOUT = LinkSettings().hold_timeout


class Fleet:
    """Quads in one world (two unless told), each with its link and its test SITL peer."""

    def __init__(self, count: int = 2, recorder=None, compiled: bool = False) -> None:
        config = load_config(default_preset('mujoco_quad_x.yaml'), '', {})
        world = load_world(DEFAULT_MODEL, count)
        self.vehicles = [MujocoVehicle(DEFAULT_MODEL, world, k) for k in range(count)]
        for vehicle in self.vehicles:
            vehicle.reset()
        self.world = FleetWorld(self.vehicles, HOLD_TIMEOUT)
        self.links: List[SitlLink] = []
        self.peers: List[SitlPeer] = []
        sources = []
        for vehicle in self.vehicles:
            state = SensorState(StateSettings(pacing=SAMPLES))
            source = MujocoLockStep(vehicle, state, config.outputs, world=self.world,
                                    recorder=recorder)
            link = SitlLink(LinkSettings(port=free_udp_port(), fresh_timeout=5.0), state,
                            on_frame=source.on_frame, on_restart=source.on_restart,
                            after_reply=source.after_reply)
            sources.append(source)
            self.links.append(link)
            self.peers.append(SitlPeer(link.address[1]))
        self.server = FleetServer(self.links, self.world,
                                  [source.held_instant for source in sources])
        self.compiled = compiled
        if compiled:  # plain frames served by the compiled frame loop, as the command does
            assert compile_frames(self.links, sources, self.server) is None
        self.server.start()
        if count == 2:
            self.peers[0].step(pwm=IDLE)
            self.join(1, IDLE)
            return
        for _ in range(20):
            self.step({k: IDLE for k in range(count)})
            if self.world.holding == list(range(count)):
                return
        raise AssertionError(f'the fleet never held all {count}: {self.world.holding}')

    def join(self, index: int, pwm: Sequence[int]) -> Dict[str, object]:
        """
        Bring SITL index (back) in: the other's frames step the world until index holds it.

        A SITL's frame joins the world's next step, whose own frames may come before or after
        it: a real SITL keeps sending, where this harness waits for every reply.
        """
        other = self.peers[1 - index]
        self.peers[index].send(pwm=pwm)
        for _ in range(200):
            other.step(pwm=IDLE)
            datagram = self.peers[index].receive(timeout=0.01)
            if datagram is not None:
                break
        assert datagram is not None, f'vehicle {index} never joined'
        self.peers[index].frame_count += 1
        assert self.world.holding == [0, 1]
        return parse_reply(datagram, '4.6')

    def step(self, pwms: Dict[int, Sequence[int]], timeout: float = 5.0, apart: float = 0.0,
             settle: bool = True) -> Dict[int, Dict[str, object]]:
        """
        Send each named peer's frame (apart seconds after the one before), read the replies.

        settle: wait for the compiled loop's bookkeeping of them (else a batch may hold several
        world steps, as it does in flight).
        """
        for order, (index, pwm) in enumerate(pwms.items()):
            if order and apart:
                time.sleep(apart)
            self.peers[index].send(pwm=pwm)
        replies = {}
        for index in pwms:
            datagram = self.peers[index].receive(timeout)
            assert datagram is not None, f'vehicle {index}: no reply to its frame'
            replies[index] = parse_reply(datagram, '4.6')
            self.peers[index].frame_count += 1
        if settle:
            self.settle()
        return replies

    def settle(self) -> None:
        """Wait for the bookkeeping of every frame the compiled loop served (no-op in Python)."""
        if self.server.compiled is not None:
            assert self.server.compiled.settle(), 'the bookkeeping never caught up'

    def close(self) -> None:
        self.server.stop()
        for link, peer in zip(self.links, self.peers):
            peer.close()
            link.stop()


@pytest.fixture(params=[False, True], ids=['python', 'compiled'])
def fleet(request):
    made = Fleet(compiled=request.param)
    yield made
    made.close()


def test_the_world_steps_once_every_sitl_sent_its_frame(fleet):
    start = [fleet.vehicles[k].state().position for k in range(2)]
    # Spaced apart at the start, both on the ground.
    assert start[0] == pytest.approx((0.0, 0.0, START_HEIGHT), abs=0.01)
    assert start[1] == pytest.approx((0.0, SPACING, START_HEIGHT), abs=0.01)
    # Vehicle 0's frame alone does not step the world: its reply waits for vehicle 1's frame.
    steps = fleet.world.steps
    fleet.peers[0].send(pwm=FULL)
    assert fleet.peers[0].receive(timeout=0.2) is None
    assert fleet.world.steps == steps
    fleet.peers[1].send(pwm=IDLE)
    assert fleet.peers[1].receive() is not None and fleet.peers[0].receive() is not None
    assert fleet.world.steps == steps + 1
    for peer in fleet.peers:
        peer.frame_count += 1
    first = fleet.step({0: FULL, 1: IDLE})
    for _ in range(599):
        replies = fleet.step({0: FULL, 1: IDLE})
    # Half a second at full power: vehicle 0 climbs, vehicle 1 still rests 2 m north of it.
    assert fleet.world.steps == steps + 601
    assert replies[0]['position'][2] < -START_HEIGHT - 0.2
    assert replies[1]['position'] == pytest.approx([SPACING, 0.0, -START_HEIGHT], abs=0.01)
    # One frame period of each SITL's clock a world step.
    for index in range(2):
        assert replies[index]['timestamp'] - first[index]['timestamp'] == pytest.approx(
            599 / 1200, abs=1e-9)


@pytest.mark.parametrize('compiled', [False, True], ids=['python', 'compiled'])
def test_one_thread_serves_every_sitl_of_a_fleet(compiled):
    fleet = Fleet(4, compiled=compiled)
    try:
        for _ in range(50):
            replies = fleet.step({k: IDLE for k in range(4)})
        assert sorted(replies) == [0, 1, 2, 3]
        serving = [thread.name for thread in threading.enumerate()
                   if thread.name.startswith('sitl-')]
        # No thread a vehicle handing frames to the world: one waits on every socket.
        assert serving == ['sitl-fleet']
        assert fleet.world.steps >= 50
        if compiled:  # the world's plain frames were the loop's, every vehicle's
            assert fleet.server.compiled.served >= 4 * 45, fleet.server.compiled.served
    finally:
        fleet.close()


def test_a_frame_the_world_fails_to_step_is_stepped_again_when_sitl_resends_it(
        fleet, monkeypatch):
    if fleet.compiled:
        pytest.skip('the compiled loop steps the world in C, where no step raises')
    from ardupilot_json_bridge.sources import mujoco_fleet
    for _ in range(10):
        fleet.step({0: FULL, 1: FULL})
    steps, advance = fleet.world.steps, mujoco_fleet.advance_together
    failures = []

    def fails_once(vehicles, duration):
        if not failures:
            failures.append(duration)
            raise RuntimeError('a solver failure')
        advance(vehicles, duration)

    monkeypatch.setattr(mujoco_fleet, 'advance_together', fails_once)
    sent = time.monotonic()
    for peer in fleet.peers:
        peer.send(pwm=FULL)
    # No reply to a frame not stepped (a reply from the state before would repeat the last).
    assert all(peer.receive(timeout=0.3) is None for peer in fleet.peers)
    assert fleet.world.steps == steps and failures
    # SITL's resends (the same frame_count), as SITL sends them: RESEND_INTERVAL after the
    # frames, longer than hold_timeout, and not at one instant. Both SITLs were silent through
    # the world's failure, not their own: the world waits for both and steps once (letting
    # the later one go as silent stepped the world once for each).
    time.sleep(max(0.0, sent + RESEND_INTERVAL - time.monotonic()))
    replies = fleet.step({0: FULL, 1: FULL}, apart=0.05)
    assert fleet.world.steps == steps + 1 and sorted(replies) == [0, 1]
    assert [link.stats.unanswered for link in fleet.links] == [1, 1]
    assert all(peer.receive(timeout=0.2) is None for peer in fleet.peers)
    # The fleet flies on.
    fleet.step({0: FULL, 1: FULL})
    assert fleet.world.steps == steps + 2


def test_a_silent_sitl_stops_holding_the_others_and_rests(fleet, caplog):
    caplog.set_level(logging.INFO, logger='ardupilot_json_bridge.fleet')
    for _ in range(119):
        fleet.step({0: FULL, 1: FULL})
    # Vehicle 1's SITL goes silent in the air: vehicle 0 waits hold_timeout once, then flies on.
    # Silent since its last frame, which the world has after this instant.
    start = time.monotonic()
    fleet.step({0: FULL, 1: FULL})
    fleet.step({0: FULL})
    assert time.monotonic() - start >= HOLD_TIMEOUT
    start = time.monotonic()
    for _ in range(1200):
        replies = fleet.step({0: FULL})
    # Not held any more: far from hold_timeout a frame.
    assert time.monotonic() - start < 1200 * HOLD_TIMEOUT / 4
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and 'vehicle 1' in warnings[0] and 'silent' in warnings[0], \
        warnings
    # Nothing drove the silent vehicle: it fell back to the ground and rests there.
    resting = fleet.vehicles[1].state()
    assert resting.position[2] == pytest.approx(START_HEIGHT, abs=0.02)
    assert max(map(abs, resting.velocity)) < 0.05
    assert fleet.world.holding == [0]
    assert replies[0]['position'][2] < -1.0
    # Its SITL comes back: it holds the world again.
    fleet.join(1, IDLE)
    fleet.step({0: FULL, 1: IDLE})


def test_a_restarted_sitl_resets_only_its_own_vehicle(fleet):
    # Flying for 600 frames, and as long as SITL takes to start again at the least.
    begun, steps = time.monotonic(), 0
    while steps < 600 or time.monotonic() - begun < RESEND_INTERVAL:
        fleet.step({0: FULL, 1: FULL})
        steps += 1
    high = [fleet.vehicles[k].state().position[2] for k in range(2)]
    assert min(high) > START_HEIGHT + 0.2
    fleet.peers[1].frame_count = 0      # SITL 1 started again, from the same port
    replies = fleet.step({0: FULL, 1: IDLE})
    assert replies[1]['timestamp'] == 0.0
    assert replies[1]['position'] == pytest.approx([SPACING, 0.0, -START_HEIGHT], abs=0.01)
    # Vehicle 0 flew on, on its own clock.
    assert replies[0]['timestamp'] > 0.4
    assert -replies[0]['position'][2] > high[0]
    assert fleet.world.holding == [0, 1]


def test_a_held_frame_is_answered_once_before_its_sitl_resends_it(fleet):
    # Vehicle 1's SITL stops; vehicle 0's reads as SITL does (one datagram a frame, a resend
    # after 1.1 s): its held frame is answered before the resend, once (SecondReply if not).
    for _ in range(10):
        fleet.step({0: FULL, 1: FULL})
    peer = fleet.peers[0]
    start = time.monotonic()
    replies = peer.lock_step(1, FULL, timeout=10.0)
    held = time.monotonic() - start
    replies += peer.lock_step(50, FULL, timeout=10.0)
    assert len(replies) == 51 and peer.resends == 0
    assert HOLD_TIMEOUT <= held < RESEND_INTERVAL
    stats = fleet.links[0].stats
    assert (stats.duplicates, stats.resent, stats.late) == (0, 0, 0)


def test_a_sitl_restarted_from_a_new_port_at_frame_0_holds_nobody(fleet, caplog):
    caplog.set_level(logging.INFO)
    for _ in range(240):
        fleet.step({0: FULL, 1: FULL})
    # SITL 1 starts again at once: a new process, a new port, frame 0.
    fleet.peers[1].close()
    fleet.peers[1] = SitlPeer(fleet.links[1].address[1])
    start = time.monotonic()
    replies = fleet.step({0: FULL, 1: IDLE})
    assert time.monotonic() - start < HOLD_TIMEOUT
    assert replies[1]['timestamp'] == 0.0
    assert replies[1]['position'] == pytest.approx([SPACING, 0.0, -START_HEIGHT], abs=0.01)
    assert replies[0]['position'][2] < -START_HEIGHT - 0.1
    stats = fleet.links[1].stats
    assert (stats.restarts, stats.strangers) == (1, 0)
    assert 'Two SITL' not in caplog.text and 'silent' not in caplog.text
    assert fleet.world.holding == [0, 1]


def test_sitls_asking_different_rates_step_the_world_by_the_fastest(fleet):
    # SITL 1 asks 400 Hz, SITL 0 1200 Hz, their frames arriving in either order: every step
    # is 1/1200 s for both (the shortest period asked), whichever frame came last.
    fleet.peers[1].rate = 400
    last = fleet.step({0: IDLE, 1: IDLE})
    for k in range(40):
        order = (0, 1) if k % 2 else (1, 0)
        replies = fleet.step({index: IDLE for index in order})
        for index in range(2):
            step = replies[index]['timestamp'] - last[index]['timestamp']
            assert step == pytest.approx(1 / 1200, abs=1e-9), (k, index)
        last = replies


def test_a_sitl_released_after_a_hold_is_not_taken_for_silent(caplog):
    # Three SITLs, the third stops: the other two are held once, then fly on, neither of them
    # dropped for the time it was held (its silence counts from the world's answer).
    fleet = Fleet(3)
    try:
        caplog.set_level(logging.WARNING, logger='ardupilot_json_bridge.fleet')
        caplog.clear()  # bringing three in one by one, this harness holds one a while
        fleet.step({0: FULL, 1: FULL, 2: FULL})
        for _ in range(20):
            fleet.step({0: FULL, 1: FULL})
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 1 and warnings[0].startswith('vehicle 2'), warnings
        assert fleet.world.holding == [0, 1]
    finally:
        fleet.close()


def test_a_recorded_fleets_clock_runs_while_vehicle_0s_sitl_is_away(tmp_path):
    pytest.importorskip('rosbags', reason='recording needs rosbags')
    from ardupilot_json_bridge.sources.flight_recorder import FlightRecorder
    recorder = FlightRecorder(str(tmp_path / 'fleet'), namespaces=['vehicle0', 'vehicle1'])
    fleet = Fleet(2, recorder=recorder)
    try:
        for _ in range(20):
            fleet.step({0: IDLE, 1: IDLE})
        # SITL 0 stops: vehicle 1 flies on (held once), its frames recorded.
        for _ in range(100):
            last = fleet.step({1: IDLE})[1]
    finally:
        fleet.close()
        recorder.close()
    topics = read_bag(tmp_path / 'fleet')
    clock = [m.clock.sec + m.clock.nanosec * 1e-9 for _, m in topics['/clock'][1]]
    imu = {namespace: [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9
                       for _, m in topics[f'/{namespace}/imu'][1]]
           for namespace in ('vehicle0', 'vehicle1')}
    # One /clock a world step (any vehicle's), vehicle 1's last included, each once.
    assert len(clock) == len(set(clock)) == len(set(imu['vehicle0']) | set(imu['vehicle1']))
    assert clock == sorted(clock) and len(imu['vehicle1']) >= 120
    assert clock[-1] == pytest.approx(imu['vehicle1'][-1], abs=1e-9)
    assert last['timestamp'] > 0.09


def test_a_compiled_fleets_recording_has_each_world_steps_clock_once(tmp_path):
    # The compiled loop bookkeeps a batch of world steps at a time: the recording still gets
    # the frames step by step, so the shared /clock is written once a step, in order.
    pytest.importorskip('rosbags', reason='recording needs rosbags')
    from ardupilot_json_bridge.sources.flight_recorder import FlightRecorder
    recorder = FlightRecorder(str(tmp_path / 'fleet'), namespaces=['vehicle0', 'vehicle1'])
    fleet = Fleet(2, recorder=recorder, compiled=True)
    steps = 300
    try:
        for _ in range(steps):
            fleet.step({0: IDLE, 1: IDLE}, settle=False)
        fleet.settle()
        batches = fleet.server.compiled.batches
    finally:
        fleet.close()
        recorder.close()
    assert batches < steps, 'no batch held two world steps: nothing was tested'
    topics = read_bag(tmp_path / 'fleet')
    clock = [m.clock.sec + m.clock.nanosec * 1e-9 for _, m in topics['/clock'][1]]
    imu = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9
           for _, m in topics['/vehicle0/imu'][1]]
    assert len(clock) == len(set(clock)) == len(imu) >= steps
    assert clock == sorted(clock)


def free_instances(count: int) -> int:
    """Return a first SITL instance whose count UDP ports (9002 + 10 I) are all free."""
    for first in range(60, 200, count):
        ports = [sitl_port(first + k) for k in range(count)]
        sockets = []
        try:
            for port in ports:
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sockets.append(sock)
                sock.bind(('127.0.0.1', port))
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError('no free SITL ports')


def test_the_fleet_command_serves_each_sitl_and_records_each_vehicle(tmp_path):
    pytest.importorskip('rosbags', reason='recording needs rosbags')
    first, bag = free_instances(2), tmp_path / 'fleet'
    command = [sys.executable, '-m', 'ardupilot_json_bridge.cli', 'mujoco', '--vehicles', '2',
               '--instance', str(first), '--record', str(bag)]
    with reaped(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)) as process:
        peers = [SitlPeer(sitl_port(first + k)) for k in range(2)]
        replies: Dict[int, list] = {}
        pwms = ([1600] * 4 + [1000] * 12, [1000] * 16)

        def run(index: int) -> None:
            replies[index] = peers[index].lock_step(300, pwms[index], timeout=60.0)

        try:
            threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(90)
        finally:
            for peer in peers:
                peer.close()
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0 and 'Traceback' not in output, output
    assert [len(replies.get(k, [])) for k in range(2)] == [300, 300], output
    assert f'lock-step with SITL instance {first + 1} (vehicle 1, namespace vehicle1)' in output
    # Vehicle 1 rests where it started, 2 m north of vehicle 0 (NED x).
    assert replies[1][-1]['position'][0] == pytest.approx(SPACING, abs=0.01)
    topics = read_bag(bag)
    for namespace in ('/vehicle0', '/vehicle1'):
        assert len(topics[f'{namespace}/imu'][1]) >= 300, sorted(topics)
        assert f'{namespace}/servo_pwm' in topics and f'{namespace}/odom' in topics
    assert '/clock' in topics and '/imu' not in topics


@pytest.mark.skipif(sitl_flight.sitl_binary() is None,
                    reason=f'real ArduCopter: set {sitl_flight.SITL_DIR_VARIABLE} to a folder '
                           'with arducopter and copter.parm')
def test_two_real_arducopters_take_off_to_their_heights_in_one_world():
    heights = (4.0, 6.0)
    flight = fleet_flight.fly_fleet(heights, speedup=2, hold=5.0)
    for index, (height, record) in enumerate(zip(heights, flight.records)):
        assert record is not None and record.armed and record.reached, (
            index, record and record.texts, flight.logs[index])
        assert record.worst_hover_error(height) < 0.5, (index, record.hover)
        assert record.worst_truth_error() < 0.5, (index, record.hover)
        print(f'vehicle {index}: hover at {height} m, worst error '
              f'{record.worst_hover_error(height):.3f} m, against MuJoCo '
              f'{record.worst_truth_error():.3f} m; {record.sim_seconds:.1f} s of hover in a '
              f'{record.wall_seconds:.1f} s flight')
    # They flew in one world side by side: the same physics clock, 2 m apart.
    north = [position[1] for position in flight.positions]
    assert north[1] - north[0] == pytest.approx(SPACING, abs=1.0)
