"""
Benchmarks of the bridge against baselines measured in the same run.

    python benchmarks/run.py            # full run, about two minutes
    python benchmarks/run.py --quick    # fewer frames, for a smoke test

Every figure is printed with a ratio against its baseline, since these machines are noisy:
1. round trip: a SITL-like client process in lock-step with the link (a source that always
   has a fresh sample, as `replay --rate 0`), against a minimal Python UDP echo server that
   returns a pre-encoded reply;
2. per-frame work: decode, state assembly, encode and PWM mapping of one frame, against
   json.dumps of the same reply;
3. fleet: 1, 4 and 8 links in this process, each driven at 1200 Hz by its own client process;
   achieved rate per link and this process's CPU;
4. conversions: ROS messages to samples, against copying their fields;
5. idle: CPU of a link with no SITL, against this process asleep;
6. MuJoCo lock-step (with mujoco installed): a frame of the quad X with the live checks and
   with a flight recording, against the frame alone; the recording's CPU in its own thread;
7. odometry on another clock: a frame on SITL's grid with the odometry stamped 1000 s off the
   IMU (every frame refused), against the same frames with both on one clock (all answered).
"""

import argparse
from dataclasses import replace
import gc
import json
import multiprocessing
import os
import socket
import statistics
import sys
import threading
import time
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from ardupilot_json_bridge.core.protocol import (  # noqa: E402
    encode_reply, encode_servo_packet, ServoPacket)
from ardupilot_json_bridge.core.pwm import (  # noqa: E402
    ActuatorMapper, ChannelScaling, OutputGroup, OutputKind)
from ardupilot_json_bridge.core.reply import build_reply  # noqa: E402
from ardupilot_json_bridge.core.samples import ImuSample, OdometrySample  # noqa: E402
from ardupilot_json_bridge.core.settings import LinkSettings, SAMPLES, StateSettings  # noqa: E402
from ardupilot_json_bridge.core.state import SensorState  # noqa: E402
from ardupilot_json_bridge.link.sitl_link import SitlLink  # noqa: E402

PHYSICS_STEP = 1.0 / 1200.0
SITL_RATE = 1200.0
# One sample per frame: the lock-step pacing, so the figures measure the link, not a clock.
LOCK_STEP = StateSettings(pacing=SAMPLES)
MOTORS = ActuatorMapper([OutputGroup(
    'motors', OutputKind.ACTUATORS, 'command/motor_speed', (1, 2, 3, 4),
    tuple(ChannelScaling(1100.0, 1900.0, 838.0) for _ in range(4)))])
ODOMETRY = OdometrySample(0.0, (10.0, -20.0, -5.0), (1.5, -0.5, 0.25),
                          (0.9238795, 0.0, 0.0, 0.3826834), (0.01, -0.02, 0.3))


def imu_sample(index: int) -> ImuSample:
    return ImuSample(index * PHYSICS_STEP, (0.01, -0.02, 0.3), (0.1, -0.2, -9.80665))


class FreshSource:
    """Always one fresh sample: pushes the next as soon as the link served the last one."""

    def __init__(self, state: SensorState) -> None:
        self.state = state
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        index = 0
        while not self.state.closed:
            if index % 24 == 0:
                self.state.push_odometry(replace(ODOMETRY, stamp=index * PHYSICS_STEP))
            self.state.push_imu(imu_sample(index))
            index += 1
            self.state.wait_until_served()


def apply_motors(packet: ServoPacket) -> None:
    """Map a frame's PWM to the quad's motors, as a source does; the state answers it."""
    MOTORS.apply(packet.pwm)


def start_bridge(port: int) -> SitlLink:
    state = SensorState(LOCK_STEP)
    # Each benchmark client is a new SITL address: let it take over at once.
    link = SitlLink(LinkSettings(port=port, fresh_timeout=1.0, peer_timeout=0.1), state,
                    on_frame=apply_motors)
    link.logger.disabled = True
    FreshSource(state).start()
    link.start()
    return link


def echo_server(port: int, reply: bytes, stop: threading.Event) -> threading.Thread:
    """Return the floor for any Python backend: receive, send a pre-encoded reply."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(('127.0.0.1', port))

    def serve() -> None:
        while not stop.is_set():
            data, sender = sock.recvfrom(2048)
            if data == b'stop':
                break
            sock.sendto(reply, sender)
        sock.close()
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def pin(cpu: int) -> None:
    """Keep this process on one core, where the OS allows it (steadier lock-step timings)."""
    if hasattr(os, 'sched_setaffinity') and (os.cpu_count() or 1) > cpu:
        os.sched_setaffinity(0, {cpu})


def unpin() -> None:
    if hasattr(os, 'sched_setaffinity'):
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))


def sitl_client(port: int, frames: int, rate: float, cpu: int,
                results: 'multiprocessing.Queue') -> None:
    """Return SITL's side: send a servo packet, wait for the reply, repeat (paced if rate > 0)."""
    if cpu >= 0:
        pin(cpu)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(2.0)
    target = ('127.0.0.1', port)
    packets = [encode_servo_packet(i, [1500] * 16) for i in range(frames)]
    latencies, answered = [], 0
    start = time.perf_counter()
    for index, packet in enumerate(packets):
        if rate > 0:
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        sent = time.perf_counter()
        sock.sendto(packet, target)
        try:
            sock.recv(4096)
        except socket.timeout:
            continue
        latencies.append(time.perf_counter() - sent)
        answered += 1
    elapsed = time.perf_counter() - start
    results.put({'port': port, 'answered': answered, 'elapsed': elapsed,
                 'latencies': latencies})


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def drive(ports: List[int], frames: int, rate: float,
          cpu: int = -1) -> Tuple[List[Dict], float, float]:
    """Run one client process per port; return their results and this process's CPU use."""
    context = multiprocessing.get_context('spawn')
    results = context.Queue()
    clients = [context.Process(target=sitl_client, args=(port, frames, rate, cpu, results))
               for port in ports]
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    for client in clients:
        client.start()
    outcome = [results.get(timeout=600) for _ in clients]
    cpu_time, wall = time.process_time() - cpu_start, time.perf_counter() - wall_start
    for client in clients:
        client.join()
    return outcome, cpu_time, wall


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def round_trip(frames: int, rounds: int) -> Dict[str, float]:
    """
    Echo and bridge in alternating rounds, so machine noise hits both alike.

    Client and servers share core 0 throughout: lock-step ping-pong across two cores of a VM
    measures the hypervisor's wake-up latency more than either server.
    """
    state = SensorState(LOCK_STEP)
    state.push_odometry(ODOMETRY)
    state.push_imu(imu_sample(0))
    reply = encode_reply(build_reply(state.wait_for_sample(0, 0.0), 0.0))[0]
    stop = threading.Event()
    echo_port = free_port()
    echo_server(echo_port, reply, stop)
    link = start_bridge(free_port())
    pin(0)
    per_round = frames // rounds
    pooled: Dict[str, List[float]] = {'echo': [], 'bridge': []}
    ratios, answered = [], 0
    for _ in range(rounds):
        rates = {}
        for name, port in (('echo', echo_port), ('bridge', link.address[1])):
            (result,), _, _ = drive([port], per_round, 0.0, cpu=0)
            rates[name] = result['answered'] / result['elapsed']
            pooled[name] += result['latencies']
            answered += result['answered'] if name == 'bridge' else 0
        ratios.append(rates['bridge'] / rates['echo'])
    unpin()
    link.stop()
    stop.set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b'stop', ('127.0.0.1', echo_port))
    figures = {'frames': per_round * rounds, 'rounds': rounds, 'bridge_answered': answered,
               'throughput_ratio': statistics.median(ratios),
               'throughput_ratios': ratios}
    for name, latencies in pooled.items():
        figures[f'{name}_fps'] = 1.0 / statistics.mean(latencies)
        figures[f'{name}_p50_us'] = percentile(latencies, 0.5) * 1e6
        figures[f'{name}_p99_us'] = percentile(latencies, 0.99) * 1e6
    return figures


class NullSocket:
    """Stands in for the link's socket so per-frame work excludes the kernel."""

    def sendto(self, data: bytes, address) -> int:
        return len(data)

    def close(self) -> None:
        pass


def socketless_link(state: SensorState, on_frame) -> SitlLink:
    """Return a quiet link whose replies go nowhere, for per-frame work without the kernel."""
    link = SitlLink(LinkSettings(port=free_port()), state, on_frame=on_frame)
    link.logger.disabled = True
    link._sock.close()
    link._sock = NullSocket()
    return link


def per_frame(frames: int) -> Dict[str, float]:
    state = SensorState(LOCK_STEP)
    link = socketless_link(state, apply_motors)
    packets = [encode_servo_packet(i, [1100 + (i % 800)] * 16) for i in range(frames)]
    samples = [imu_sample(i) for i in range(frames)]
    odometry = [replace(ODOMETRY, stamp=i * PHYSICS_STEP) for i in range(frames)]
    sender = ('127.0.0.1', 40000)
    start = time.perf_counter()
    for index in range(frames):
        state.push_odometry(odometry[index])
        state.push_imu(samples[index])
    push = (time.perf_counter() - start) / frames
    state = SensorState(LOCK_STEP)
    link.state = state
    start = time.perf_counter()
    for index in range(frames):
        state.push_odometry(odometry[index])
        state.push_imu(samples[index])
        link.handle_datagram(packets[index], sender)
    frame = (time.perf_counter() - start) / frames - push
    assert link.stats.replied == frames, link.stats.summary()
    document = {'timestamp': 1.0, 'imu': {'gyro': [0.01, -0.02, 0.3],
                                          'accel_body': [0.1, -0.2, -9.80665]},
                'position': [10.0, -20.0, -5.0], 'quaternion': [0.9238795, 0.0, 0.0, 0.3826834],
                'velocity': [1.5, -0.5, 0.25]}
    start = time.perf_counter()
    for _ in range(frames):
        ('\n' + json.dumps(document, separators=(',', ':')) + '\n').encode()
    dumps = (time.perf_counter() - start) / frames
    return {'frame_us': frame * 1e6, 'push_us': push * 1e6, 'json_dumps_us': dumps * 1e6}


def odometry_clock_offset(frames: int) -> Dict[str, float]:
    """Per-frame time on the grid, odometry on the IMU's clock and 1000 s off it."""
    packets = [encode_servo_packet(i, [1500] * 16) for i in range(frames)]
    figures = {}
    for name, offset in (('same_clock', 0.0), ('offset_1000s', 1000.0)):
        # The grid starts at the newest sample, and each frame's instant is the newest sample's
        # stamp but for rounding: the horizon takes the last bit of it.
        state = SensorState(StateSettings(horizon=1e-9))
        link = socketless_link(state, None)
        start = time.perf_counter()
        for index in range(frames):
            if index % 4 == 0:
                state.push_odometry(replace(ODOMETRY, stamp=index * PHYSICS_STEP + offset))
            state.push_imu(imu_sample(index))
            link.handle_datagram(packets[index], ('127.0.0.1', 40000))
        figures[f'{name}_us'] = (time.perf_counter() - start) / frames * 1e6
        answered = frames if offset == 0.0 else 0
        assert link.stats.replied == answered, link.stats.summary()
    return figures


def conversions(count: int) -> Dict[str, float]:
    from ardupilot_json_bridge.messages import inputs
    from ardupilot_json_bridge.sources.bagfile import typestore
    from ardupilot_json_bridge.sources.sample_bag import (
        motion_imu_message, motion_odometry_message, SteadyMotion)
    store = typestore('jazzy')
    motion = SteadyMotion(velocity=(1.0, 2.0, 0.5), yaw_rate=0.1)
    odometry = motion_odometry_message(store, motion, 1.0, 1.0)
    imu = motion_imu_message(store, motion, 1.0, 1.0)
    mounting = inputs.imu_mounting(0, 0, 0)
    figures = {}
    for name, function in (
            ('odometry_us', lambda: inputs.odometry_to_sample(odometry)),
            ('imu_us', lambda: inputs.imu_to_sample(imu, mounting)),
            ('copy_fields_us', lambda: (
                odometry.header.stamp.sec, odometry.pose.pose.position.x,
                odometry.pose.pose.position.y, odometry.pose.pose.position.z,
                odometry.pose.pose.orientation.x, odometry.pose.pose.orientation.y,
                odometry.pose.pose.orientation.z, odometry.pose.pose.orientation.w,
                odometry.twist.twist.linear.x, odometry.twist.twist.linear.y,
                odometry.twist.twist.linear.z, odometry.twist.twist.angular.x,
                odometry.twist.twist.angular.y, odometry.twist.twist.angular.z))):
        start = time.perf_counter()
        for _ in range(count):
            function()
        figures[name] = (time.perf_counter() - start) / count * 1e6
    return figures


def idle(seconds: float) -> Dict[str, float]:
    start_cpu, start = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    asleep = (time.process_time() - start_cpu) / (time.perf_counter() - start)
    state = SensorState(LOCK_STEP)
    link = SitlLink(LinkSettings(port=free_port()), state)
    link.start()
    start_cpu, start = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    linked = (time.process_time() - start_cpu) / (time.perf_counter() - start)
    link.stop()
    return {'asleep_cpu_percent': asleep * 100, 'idle_link_cpu_percent': linked * 100}


def fleet(sizes: List[int], seconds: float) -> List[Dict[str, float]]:
    rows = []
    frames = int(SITL_RATE * seconds)
    for size in sizes:
        links = [start_bridge(free_port()) for _ in range(size)]
        outcome, cpu, wall = drive([link.address[1] for link in links], frames, SITL_RATE)
        for link in links:
            link.stop()
        rates = [r['answered'] / r['elapsed'] for r in outcome]
        rows.append({'links': size, 'min_rate_hz': min(rates), 'mean_rate_hz':
                     statistics.mean(rates), 'bridge_cpu_percent': cpu / wall * 100,
                     'p99_us': max(percentile(r['latencies'], 0.99) for r in outcome) * 1e6})
    return rows


def mujoco_lock_step(frames: int, folder: str) -> Dict[str, float]:
    """Per-frame time of the MuJoCo lock-step: plain, with the live checks, recording."""
    from ardupilot_json_bridge.checks.conventions import ConventionChecker
    from ardupilot_json_bridge.sources.flight_recorder import FlightRecorder
    from ardupilot_json_bridge.sources.mujoco_source import MujocoLockStep
    from ardupilot_json_bridge.sources.mujoco_vehicle import MujocoVehicle
    packets = [encode_servo_packet(i, [1550] * 4 + [1000] * 12) for i in range(frames)]
    figures = {}
    for name in ('plain', 'checks', 'recording'):
        state = SensorState(LOCK_STEP)
        recorder = FlightRecorder(os.path.join(folder, 'flight')) if name == 'recording' else None
        source = MujocoLockStep(MujocoVehicle(), state, MOTORS.groups[0], recorder=recorder,
                                checker=ConventionChecker() if name == 'checks' else None)
        link = socketless_link(state, source.on_frame)
        start, cpu = time.perf_counter(), time.process_time()
        for packet in packets:
            link.handle_datagram(packet, ('127.0.0.1', 40000))
        figures[f'{name}_us'] = (time.perf_counter() - start) / frames * 1e6
        source.close()
        figures[f'{name}_cpu_us'] = (time.process_time() - cpu) / frames * 1e6
        assert link.stats.replied == frames, link.stats.summary()
    return figures


def verdict(ok: bool) -> str:
    return 'met' if ok else 'MISSED'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true', help='fewer frames (smoke test)')
    parser.add_argument('--json', help='also write the figures to this file')
    args = parser.parse_args()
    frames = 2000 if args.quick else 20000
    print(f'machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, '
          f'{sys.platform}')

    # The in-process measurements first, before any thread or client process exists.
    gc.collect()
    work = per_frame(frames)
    print('\nper-frame work (decode, state assembly, encode, PWM mapping; sample push '
          'excluded)')
    print(f'   frame {work["frame_us"]:.1f} us = {work["frame_us"] / work["json_dumps_us"]:.2f}'
          f' x json.dumps of the reply ({work["json_dumps_us"]:.1f} us); sample push '
          f'{work["push_us"]:.1f} us (target <= 30 us: {verdict(work["frame_us"] <= 30)})')

    trip = round_trip(frames, 3 if args.quick else 5)
    throughput = trip['throughput_ratio']
    p99_limit = 1.5 * trip['echo_p99_us'] + 100.0
    print(f'\nround trip, {trip["frames"]} lock-step frames each, in {trip["rounds"]} '
          f'alternating rounds ({trip["bridge_answered"]} answered)')
    print(f'   echo   {trip["echo_fps"]:8.0f} frames/s  p50 {trip["echo_p50_us"]:6.1f} us  '
          f'p99 {trip["echo_p99_us"]:6.1f} us')
    print(f'   bridge {trip["bridge_fps"]:8.0f} frames/s  p50 {trip["bridge_p50_us"]:6.1f} us  '
          f'p99 {trip["bridge_p99_us"]:6.1f} us')
    print(f'   throughput {throughput:.2f} x echo, median of rounds '
          f'{", ".join(f"{r:.2f}" for r in trip["throughput_ratios"])} '
          f'(target >= 0.70: {verdict(throughput >= 0.7)})')
    print(f'   p99 {trip["bridge_p99_us"] / trip["echo_p99_us"]:.2f} x echo; limit 1.5 x echo '
          f'+ 100 us = {p99_limit:.0f} us ({verdict(trip["bridge_p99_us"] <= p99_limit)})')

    print('\nfleet: links in this process, each driven at 1200 Hz by its own client')
    rows = fleet([1, 2] if args.quick else [1, 4, 8], 1.0 if args.quick else 5.0)
    for row in rows:
        print(f'   {row["links"]} link(s): min {row["min_rate_hz"]:6.0f} Hz '
              f'({row["min_rate_hz"] / SITL_RATE:.3f} x 1200), mean {row["mean_rate_hz"]:6.0f}'
              f' Hz, p99 {row["p99_us"]:6.0f} us, bridge CPU {row["bridge_cpu_percent"]:5.1f} %'
              f' of a core ({verdict(row["min_rate_hz"] >= 1150)} >= 1150 Hz)')

    convert = conversions(2000 if args.quick else 20000)
    print('\nconversions per sample')
    for name in ('odometry_us', 'imu_us'):
        print(f'   {name[:-3]:9s} {convert[name]:6.1f} us = '
              f'{convert[name] / convert["copy_fields_us"]:5.1f} x copying its fields '
              f'({convert["copy_fields_us"]:.2f} us)')

    offset = odometry_clock_offset(2000 if args.quick else 20000)
    print('\nodometry on another clock (grid pacing, per frame, socket excluded)')
    print(f'   same clock       {offset["same_clock_us"]:6.1f} us, every frame answered')
    refused, answered = offset['offset_1000s_us'], offset['same_clock_us']
    print(f'   1000 s off       {refused:6.1f} us = {refused / answered:.2f} x same clock, every '
          f'frame refused (target <= 1 x: {verdict(refused <= answered)})')

    quiet = idle(1.0 if args.quick else 5.0)
    print('\nidle, no SITL')
    print(f'   link {quiet["idle_link_cpu_percent"]:.3f} % of a core; process asleep '
          f'{quiet["asleep_cpu_percent"]:.3f} % (target < 1 %: '
          f'{verdict(quiet["idle_link_cpu_percent"] < 1.0)})')
    engine = {}
    try:
        import mujoco  # noqa: F401
    except ImportError:
        print('\nMuJoCo lock-step: skipped (pip install mujoco)')
    else:
        import tempfile
        with tempfile.TemporaryDirectory() as folder:
            engine = mujoco_lock_step(1200 if args.quick else 12000, folder)
        plain = engine['plain_us']
        print('\nMuJoCo lock-step frame (step the quad X, push, answer; socket excluded)')
        print(f'   plain      {plain:6.1f} us')
        print(f'   checks     {engine["checks_us"]:6.1f} us = {engine["checks_us"] / plain:.2f} x '
              'plain')
        print(f'   recording  {engine["recording_us"]:6.1f} us = '
              f'{engine["recording_us"] / plain:.2f} x plain on the frame path; all CPU with '
              f'the bag written {engine["recording_cpu_us"]:.1f} us = '
              f'{engine["recording_cpu_us"] / engine["plain_cpu_us"]:.2f} x plain')
    if args.json:
        with open(args.json, 'w') as output:
            json.dump({'round_trip': trip, 'per_frame': work, 'fleet': rows,
                       'conversions': convert, 'odometry_clock_offset': offset, 'idle': quiet,
                       'mujoco': engine}, output,
                      indent=2)
    return 0


if __name__ == '__main__':
    sys.exit(main())
