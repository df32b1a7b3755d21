"""
Where a MuJoCo lock-step frame's microseconds go, stage by stage.

    python benchmarks/frame_profile.py [--frames 4000] [--record] [--held 3] [--no-step-ahead]

The `mujoco_lock_step` setup of run.py (the quad X with the live checks, a socketless link,
stepping ahead as the mujoco command does; the PWM changes every --held frames):
each stage's calls are wrapped in a timer of the serving thread's CPU time (time.thread_time),
and the table prints microseconds per frame. The timers cost a little each (in "the rest").
"""

import argparse
import collections
import statistics
import sys
import tempfile
import time
import types
from typing import Callable, Counter, Dict, List, Optional, Tuple

import mujoco
from run import LOCK_STEP, MOTORS, NullSocket, socketless_link

from ardupilot_json_bridge.checks.conventions import ConventionChecker
from ardupilot_json_bridge.core.protocol import encode_servo_packet
from ardupilot_json_bridge.core.state import SensorState
from ardupilot_json_bridge.link import sitl_link
from ardupilot_json_bridge.sources import mujoco_source
from ardupilot_json_bridge.sources.flight_recorder import FlightRecorder
from ardupilot_json_bridge.sources.mujoco_source import MujocoLockStep
from ardupilot_json_bridge.sources.mujoco_vehicle import MujocoVehicle

WARM_UP = 200
AFTER_SEND = 'after the reply: '
AFTER_REPLY = AFTER_SEND + 'recording, viewer'


def timer(spent: Counter, stage: str, function: Callable) -> Callable:
    """Return function, adding its CPU time per call to spent[stage]."""
    def timed(*args, **kwargs):
        start = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[stage] += time.thread_time() - start
    return timed


class TimedSocket(NullSocket):
    """A NullSocket that notes when each reply is sent (time.perf_counter)."""

    sent = 0.0

    def sendto(self, data: bytes, address) -> int:
        self.sent = time.perf_counter()
        return len(data)


def held_pwm(index: int, held: int) -> list:
    """Frame index's PWM: a new value every held frames (ArduCopter's 400 Hz loop: 3), or 0."""
    value = 1550 + (index // held) % 7 if held else 1550
    return [value] * 4 + [1000] * 12


def until_sent(frames: int, held: int, ahead: bool) -> Tuple[float, Optional[float], int]:
    """
    Median wall time (s) from a packet handed to the link to its reply sent, no timers.

    For the frames answered on arrival and for the others (None if none), and how many of
    the frames were answered on arrival.
    """
    state = SensorState(LOCK_STEP)
    source = MujocoLockStep(MujocoVehicle(), state, MOTORS.groups[0],
                            checker=ConventionChecker(window=10.0))
    link = socketless_link(state, source.on_frame)
    link.after_reply = source.after_reply
    # A checkout from before stepping ahead (86a977a) has neither.
    link.step_ahead = getattr(source, 'step_ahead', None) if ahead else None
    link._sock = sock = TimedSocket()
    waits: Dict[bool, List[float]] = {True: [], False: []}
    for index in range(frames):
        packet = encode_servo_packet(index, held_pwm(index, held))
        answered = getattr(link.stats, 'answered_on_arrival', 0)
        start = time.perf_counter()
        link.handle_datagram(packet, ('127.0.0.1', 40000))
        if index >= WARM_UP:
            waits[getattr(link.stats, 'answered_on_arrival', 0) > answered].append(
                sock.sent - start)
    others = statistics.median(waits[False]) if waits[False] else None
    on_arrival = statistics.median(waits[True]) if waits[True] else None
    return on_arrival, others, len(waits[True])


def profile(frames: int, record: bool, held: int, ahead: bool) -> None:
    spent: Counter = collections.Counter()
    state = SensorState(LOCK_STEP)
    vehicle = MujocoVehicle()
    recorder = FlightRecorder(tempfile.mkdtemp() + '/flight') if record else None
    source = MujocoLockStep(vehicle, state, MOTORS.groups[0],
                            checker=ConventionChecker(window=10.0), recorder=recorder)
    link = socketless_link(state, source.on_frame)
    link.after_reply = timer(spent, AFTER_REPLY, source.after_reply)
    if ahead:
        link.step_ahead = getattr(source, 'step_ahead', None)
    sitl_link.decode_servo_packet = timer(spent, 'datagram: decode, bookkeeping, send',
                                          sitl_link.decode_servo_packet)
    link.session.classify = timer(spent, 'datagram: decode, bookkeeping, send',
                                  link.session.classify)
    link._send = timer(spent, 'datagram: decode, bookkeeping, send', link._send)
    source.mapper.commands = timer(spent, 'PWM mapping', source.mapper.commands)
    vehicle.set_commands = timer(spent, 'PWM mapping', vehicle.set_commands)
    # The vehicle's own handle on mujoco, so only its steps are timed.
    functions = types.SimpleNamespace(**{name: getattr(mujoco, name) for name in dir(mujoco)
                                         if not name.startswith('__')})
    functions.mj_step = timer(spent, 'physics: mj_step, mj_step2', mujoco.mj_step)
    functions.mj_step2 = timer(spent, 'physics: mj_step, mj_step2', mujoco.mj_step2)
    functions.mj_forward = timer(spent, 'physics: mj_forward', mujoco.mj_forward)
    functions.mj_getState = timer(spent, 'step ahead: state kept, set back', mujoco.mj_getState)
    functions.mj_setState = timer(spent, 'step ahead: state kept, set back', mujoco.mj_setState)
    vehicle._mujoco = functions
    vehicle.advance = timer(spent, 'physics: the whole advance', vehicle.advance)
    vehicle.state = timer(spent, 'sensor read', vehicle.state)
    # A checkout from before the reply was sent ahead of the push (fdf4b96) pushes in on_frame.
    if hasattr(state, 'push_instant'):
        mujoco_source.frame_instant = timer(spent, 'sensor read', mujoco_source.frame_instant)
        state.push_instant = timer(spent, AFTER_SEND + 'state push', state.push_instant)
    else:
        mujoco_source.vehicle_samples = timer(spent, 'sensor read',
                                              mujoco_source.vehicle_samples)
        state.push_frame = timer(spent, 'state push', state.push_frame)
    source.checker.add_frame = timer(spent, 'live checks (hand-off)', source.checker.add_frame)
    state.wait_for_sample = timer(spent, 'alignment (the instant)', state.wait_for_sample)
    link.session.timestamp_for = timer(spent, 'alignment (the instant)',
                                       link.session.timestamp_for)
    sitl_link.build_reply = timer(spent, 'JSON', sitl_link.build_reply)
    sitl_link.encode_reply = timer(spent, 'JSON', sitl_link.encode_reply)
    link.session.record_reply = timer(spent, AFTER_SEND + 'session, served',
                                      link.session.record_reply)
    state.mark_served = timer(spent, AFTER_SEND + 'session, served', state.mark_served)
    packets = [encode_servo_packet(i, held_pwm(i, held)) for i in range(frames)]
    for packet in packets[:WARM_UP]:
        link.handle_datagram(packet, ('127.0.0.1', 40000))
    spent.clear()
    start = time.thread_time()
    for packet in packets[WARM_UP:]:
        link.handle_datagram(packet, ('127.0.0.1', 40000))
    total = time.thread_time() - start
    # The live checks take the frames in when they judge, in their own thread.
    start = time.thread_time()
    with source.checker._lock:
        source.checker._take_frames()
    batch = time.thread_time() - start
    if recorder is not None:
        recorder.close()
    count = frames - WARM_UP
    whole = spent.pop('physics: the whole advance')
    spent['physics: rotor lag, ctrl'] = whole - spent['physics: mj_step, mj_step2'] - spent[
        'physics: mj_forward']
    print(f'{total / count * 1e6:.1f} us of CPU a frame ({count} frames, model integrator '
          f'{mujoco.mjtIntegrator(vehicle.model.opt.integrator).name}):')
    for stage, seconds in sorted(spent.items()):
        print(f'  {stage:40s} {seconds / count * 1e6:6.1f} us')
    print(f'  {"the rest (link loop, dispatch, timers)":40s} '
          f'{(total - sum(spent.values())) / count * 1e6:6.1f} us')
    print("off the frame path, in the checks' judge thread: taking the frames in "
          f'{batch / count * 1e6:.1f} us a frame (the newest {len(source.checker._imu)} kept)')
    on_arrival, others, count = until_sent(frames, held, ahead)
    print('without the timers, from a packet handed to the link to its reply sent (median): '
          + (f'{on_arrival * 1e6:.1f} us for the {count} frames answered on arrival, '
             if count else '')
          + ('' if others is None else f'{others * 1e6:.1f} us for the others'))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--frames', type=int, default=4000)
    parser.add_argument('--record', action='store_true', help='record the flight too')
    parser.add_argument('--held', type=int, default=3,
                        help='frames each PWM is held for (3: ArduCopter at 400 Hz, 1200 '
                             'frames/s; 0: one PWM throughout)')
    parser.add_argument('--no-step-ahead', action='store_true',
                        help='step each frame only once its packet is in')
    args = parser.parse_args()
    profile(max(args.frames, WARM_UP + 1), args.record, args.held, not args.no_step_ahead)
    return 0


if __name__ == '__main__':
    sys.exit(main())
