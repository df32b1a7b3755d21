"""
How fast real ArduCopter runs in lock-step with each backend, side by side in one run.

    python benchmarks/sitl_speed.py [--seconds 12] [--rounds 3] [--flat]
                                    [--variant LABEL=DIR[,FLAG...]]

Needs ARDUPILOT_SITL_DIR (a folder with a prebuilt arducopter and its copter.parm) and
pymavlink. Each backend flies the same SITL at --speedup 100 for --seconds of wall time, in
rounds that alternate the backends; the figure is SITL's own clock (SYSTEM_TIME over MAVLink)
per wall second:
1. do-nothing: a Python JSON backend answering every frame with a pre-formatted reply of a
   vehicle at rest (only the timestamp changes): the ceiling of any Python lock-step backend;
2. mujoco: `ardupilot-json-bridge mujoco`, the built-in engine, with its live checks;
3. quad: SITL's built-in `--model quad`, no backend at all;
4. with --flat, flat mujoco: the quad X flown by this file's own minimal Python backend (no
   checks, histories or session rules), the floor of a Python MuJoCo lock-step frame.
The mujoco figure as a ratio to the do-nothing one is what issue 21 asks to be >= 0.8.
Each --variant adds `mujoco LABEL` to the rounds: the package imported from DIR (a checkout,
e.g. `git archive main | tar -x -C /tmp/main`) with the mujoco command's FLAGs, so a change
is measured before and after in one run.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test'))

from proc_stats import cpu_seconds  # noqa: E402
import sitl_flight  # noqa: E402

SPEEDUP = 100
# SITL's JSON frames per second of its own clock (the default SIM_RATE_HZ of ArduCopter).
FRAME_RATE = 1200
WARMUP = 3.0
MAGIC_16 = 18458
REPLY = ('\n{{"timestamp":{:.6f},"imu":{{"gyro":[0,0,0],"accel_body":[0,0,-9.80665]}},'
         '"position":[0,0,0],"velocity":[0,0,0],"quaternion":[1,0,0,0]}}\n')


def sitl_folder() -> str:
    folder = os.environ.get('ARDUPILOT_SITL_DIR', '')
    if not os.access(os.path.join(folder, 'arducopter'), os.X_OK):
        sys.exit('set ARDUPILOT_SITL_DIR to a folder with a prebuilt arducopter')
    return folder


def start_sitl(folder: str, model: str, scratch: str, quad_x: Optional[str],
               instance: int = 0) -> subprocess.Popen:
    """Start ArduCopter at SPEEDUP against model, in scratch, MAVLink on tcp 5760 + 10 I."""
    defaults = os.path.join(folder, 'copter.parm') + (',' + quad_x if quad_x else '')
    work = os.path.join(scratch, str(instance))
    os.makedirs(work, exist_ok=True)
    return subprocess.Popen(
        [os.path.join(folder, 'arducopter'), '--model', model, '--speedup', str(SPEEDUP),
         f'-I{instance}', '--serial0', 'tcp:0', '--defaults', defaults, '--wipe'],
        cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def do_nothing_backend() -> subprocess.Popen:
    """Start a child process answering SITL on UDP 9002 with REPLY, a frame period a frame."""
    code = f"""
import socket, struct
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(('127.0.0.1', 9002))
last, time = -1, 0.0
reply = b''
while True:
    data, peer = sock.recvfrom(1024)
    if len(data) < 8 or struct.unpack_from('<H', data)[0] != {MAGIC_16}:
        continue
    rate, count = struct.unpack_from('<HI', data, 2)
    if count != last:
        if count < last:
            time = 0.0
        last = count
        time += 1.0 / (rate or 1200)
        reply = {REPLY!r}.format(time).encode()
    sock.sendto(reply, peer)
"""
    return subprocess.Popen([sys.executable, '-c', code])


def flat_mujoco_backend() -> subprocess.Popen:
    """
    Start a child process flying the quad X in lock-step with the least a Python backend does.

    Per new frame: PWM to rotor speeds (the preset's scaling), the rotors' lag, MuJoCo's split
    step and forward pass, the sensors to NED/FRD and the reply's 17 numbers (repr): no
    session rules, checks, histories or recording. Written here, apart from the package, as
    the floor of a Python MuJoCo backend's frame.
    """
    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..',
                         'ardupilot_json_bridge', 'sources', 'models', 'quad_x.xml')
    code = f"""
import math, socket, struct
import mujoco
m = mujoco.MjModel.from_xml_path({model!r})
d = mujoco.MjData(m)
def numeric(name):
    return float(m.numeric_data[m.numeric_adr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_NUMERIC,
                                                                name)]])
def sensor(name):
    return int(m.sensor_adr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, name)])
thrust, lag = numeric('rotor_thrust_coefficient'), numeric('rotor_time_constant')
top, gyro, accel = numeric('rotor_max_speed'), sensor('gyro'), sensor('accelerometer')
blend = 1.0 - math.exp(-m.opt.timestep / lag)
h = math.sqrt(0.5)
form = ('\\n{{"timestamp":%r,"imu":{{"gyro":[%r,%r,%r],"accel_body":[%r,%r,%r]}},'
        '"position":[%r,%r,%r],"quaternion":[%r,%r,%r,%r],"velocity":[%r,%r,%r]}}\\n')
mujoco.mj_forward(m, d)
speeds = [0.0] * 4
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(('127.0.0.1', 9002))
last, origin, reply = -1, 0.0, b''
while True:
    data, peer = sock.recvfrom(1024)
    if len(data) < 40 or struct.unpack_from('<H', data)[0] != {MAGIC_16}:
        continue
    fields = struct.unpack_from('<HI4H', data, 2)
    if fields[1] != last:
        if fields[1] < last:
            origin = d.time
        last = fields[1]
        commands = [min(max((p - 1100.0) / 800.0, 0.0), 1.0) * 838.0 for p in fields[2:]]
        speeds = [s + blend * (min(c, top) - s) for s, c in zip(speeds, commands)]
        d.ctrl[:] = [thrust * s * s for s in speeds]
        mujoco.mj_step2(m, d)
        mujoco.mj_forward(m, d)
        px, py, pz, w, x, y, z = d.qpos.tolist()
        vx, vy, vz = d.qvel[:3].tolist()
        s = d.sensordata.tolist()
        reply = (form % (d.time - origin, s[gyro], -s[gyro + 1], -s[gyro + 2], s[accel],
                         -s[accel + 1], -s[accel + 2], py, px, -pz, h * w + h * z, h * x + h * y,
                         h * x - h * y, h * w - h * z, vy, vx, -vz)).encode()
    sock.sendto(reply, peer)
"""
    return subprocess.Popen([sys.executable, '-c', code])


def mujoco_backend(vehicles: int = 1, source: Optional[str] = None,
                   flags: Sequence[str] = (), log: Optional[str] = None) -> subprocess.Popen:
    """
    Start `mujoco`, importing the package from source (a checkout) when given.

    With log, its info lines go to that file (how many steps ahead were kept, at its end).
    """
    environment = dict(os.environ)
    if source:
        environment['PYTHONPATH'] = os.pathsep.join(
            [source] + [p for p in environment.get('PYTHONPATH', '').split(os.pathsep) if p])
    # python -m puts its working folder first on the path: the source's, or the checkout
    # the benchmark runs from would shadow it.
    stream = open(log, 'w') if log else None
    try:
        return subprocess.Popen([sys.executable, '-m', 'ardupilot_json_bridge.cli', 'mujoco',
                                 '--log-level', 'info' if log else 'warning',
                                 '--vehicles', str(vehicles), *flags],
                                stdout=subprocess.DEVNULL, stderr=stream, env=environment,
                                cwd=source or None)
    finally:
        if stream is not None:
            stream.close()


def stepped_ahead(log: str) -> Optional[str]:
    """Return the mujoco command's closing line on its steps ahead, if its log has one."""
    with open(log, errors='replace') as stream:
        lines = [line for line in stream if 'stepped ahead' in line]
    return lines[-1].strip().split('] ')[-1] if lines else None


def per_frame(cpu: Optional[float], frames: int) -> str:
    """CPU seconds per SITL second as microseconds per frame; n/a for a process gone."""
    return 'n/a (the process died)' if cpu is None else f'{cpu / frames * 1e6:.1f} us'


def clock_rate(boot_ms: Callable[[float], Optional[int]], seconds: float,
               pids: Sequence[int]) -> Tuple[float, List[Optional[float]]]:
    """
    Return SITL's clock per wall second, and each pid's CPU seconds per SITL second.

    Both over seconds of wall time after a warm-up; boot_ms(until) reads SITL's newest boot
    time (ms) until the wall clock's until. A process gone before the end has no CPU figure.
    """
    boot_ms(time.monotonic() + WARMUP)
    start_wall = time.monotonic()
    start_ms = boot_ms(start_wall + 0.5)
    start_cpu = [cpu_seconds(pid) for pid in pids]
    end_ms = boot_ms(start_wall + seconds)
    end_cpu = [cpu_seconds(pid) for pid in pids]
    wall = time.monotonic() - start_wall
    if start_ms is None or end_ms is None or end_ms <= start_ms:
        return 0.0, [0.0 for _ in pids]
    simulated = (end_ms - start_ms) / 1000.0
    return simulated / (wall - 0.25), [
        None if s is None or e is None else (e - s) / simulated
        for s, e in zip(start_cpu, end_cpu)]


def sim_rate(seconds: float,
             pids: Sequence[int] = ()) -> Tuple[float, List[Optional[float]]]:
    """Return SITL's clock rate and the pids' CPU (clock_rate), the vehicle at rest, unarmed."""
    from pymavlink import mavutil
    deadline = time.monotonic() + 30.0
    while True:
        try:
            mav = mavutil.mavlink_connection('tcp:127.0.0.1:5760', source_system=255,
                                             autoreconnect=False)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    try:
        mav.wait_heartbeat(timeout=30)
        mav.mav.request_data_stream_send(mav.target_system, mav.target_component,
                                         mavutil.mavlink.MAV_DATA_STREAM_ALL, 10, 1)

        def boot_ms(until: float) -> Optional[int]:
            newest = None
            while time.monotonic() < until:
                message = mav.recv_match(type='SYSTEM_TIME', blocking=True, timeout=0.2)
                if message is not None:
                    newest = message.time_boot_ms
            return newest

        return clock_rate(boot_ms, seconds, pids)
    finally:
        mav.close()


class StartedSitl:
    """A SITL this file started, as sitl_flight.Flight takes one (MAVLink on tcp 5760)."""

    mavlink_port = 5760

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise sitl_flight.SitlDied(self.failure('died'))

    def failure(self, what: str) -> str:
        return f'SITL {what} (exit status {self.process.poll()})'


def hover_rate(sitl: subprocess.Popen, seconds: float, pids: Sequence[int], altitude: float,
               climbs: bool) -> Tuple[float, List[Optional[float]], str]:
    """
    Return SITL's clock rate and the pids' CPU (clock_rate) while hovering at altitude.

    EKF ready, GUIDED, arm, take off (a backend that cannot climb, climbs False, is timed
    armed on the ground); also returns the altitudes SITL reported while timed.
    """
    flight = sitl_flight.Flight(StartedSitl(sitl))
    try:
        if not flight.wait_ready(60.0):
            return 0.0, [0.0 for _ in pids], 'EKF not ready: ' + '; '.join(
                flight.record.texts[-3:])
        # Arm and take off in one breath: at --speedup 100 an armed copter left on the ground
        # for a wall second has disarmed itself.
        deadline = time.monotonic() + 60.0
        while not (flight.relative_alt > altitude - 0.3 if climbs
                   else flight.mav.motors_armed()):
            if time.monotonic() > deadline:
                return 0.0, [0.0 for _ in pids], (
                    f'not up: {flight.relative_alt:.2f} m; ' + '; '.join(
                        flight.record.texts[-3:]))
            flight.set_mode('GUIDED')
            flight.mav.arducopter_arm()
            flight.takeoff(altitude)
            flight.pump(0.5)
        heights = []

        def boot_ms(until: float) -> Optional[int]:
            while time.monotonic() < until:
                flight.pump(min(0.1, max(0.0, until - time.monotonic())))
                heights.append(flight.relative_alt)
            return flight.boot_ms or None

        rate, cpu = clock_rate(boot_ms, seconds, pids)
        return rate, cpu, f'altitude {min(heights):.2f} to {max(heights):.2f} m'
    finally:
        flight.close()


def measure(kind: str, folder: str, seconds: float, quad_x: Optional[str],
            variants: Dict[str, Tuple[str, List[str]]], hover: Optional[float] = None) -> float:
    """
    SITL instance 0's clock rate with backend kind (mujoco xN: a fleet of N, N SITLs).

    At rest and unarmed, or with hover, hovering at that altitude (m).
    """
    scratch = tempfile.mkdtemp(prefix='sitl-speed-')
    vehicles = int(kind.split('x')[-1]) if kind.startswith('mujoco x') else 1
    log = os.path.join(scratch, 'backend.log') if kind.startswith('mujoco') else None
    if kind.startswith('mujoco'):
        source, flags = variants.get(kind, (None, []))
        child = mujoco_backend(vehicles, source, flags, log)
    else:
        child = {'do-nothing': do_nothing_backend,
                 'flat mujoco': flat_mujoco_backend}.get(kind, lambda: None)()
    model = 'quad' if kind == 'quad' else 'JSON:127.0.0.1'
    time.sleep(1.0 if child else 0.0)
    sitls = [start_sitl(folder, model, scratch, quad_x, k) for k in range(vehicles)]
    pids = [p.pid for p in [child, sitls[0]] if p is not None]
    try:
        if hover is None:
            rate, cpu = sim_rate(seconds, pids)
        else:
            rate, cpu, heights = hover_rate(sitls[0], seconds, pids, hover,
                                            climbs=kind != 'do-nothing')
            print(f'    {heights}', flush=True)
        if child is not None:
            frames = FRAME_RATE  # SITL frames per SITL second
            print(f'    CPU per SITL frame: backend {per_frame(cpu[0], frames)}, SITL '
                  f'{per_frame(cpu[1], frames)}', flush=True)
        return rate
    finally:
        for process in sitls + [child]:
            if process is not None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
        guesses = stepped_ahead(log) if log else None
        if guesses:
            print(f'    {guesses}', flush=True)
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--seconds', type=float, default=12.0)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--variant', action='append', default=[], metavar='LABEL=DIR[,FLAG]',
                        help='also fly `mujoco LABEL`: the package from the checkout DIR '
                             '(empty: this one) with the mujoco command flags given')
    parser.add_argument('--flat', action='store_true',
                        help="also fly a flat Python MuJoCo backend (this file's, no checks, "
                             'histories or session rules): the floor of a Python frame')
    parser.add_argument('--hover', type=float, metavar='M',
                        help='time each backend with the copter hovering M m up (EKF ready, '
                             'GUIDED, armed, taken off) instead of at rest, unarmed: its PWM '
                             'changes as in flight (the do-nothing backend is timed armed)')
    parser.add_argument('--fleet', help='fleet sizes to fly instead (e.g. 1,2,4): mujoco '
                                        '--vehicles N with N SITLs, against the do-nothing '
                                        'backend')
    args = parser.parse_args()
    folder = sitl_folder()
    here = os.path.dirname(os.path.abspath(__file__))
    quad_x = os.path.join(here, '..', 'config', 'quad_x.parm')
    quad_x = quad_x if os.path.isfile(quad_x) else None
    variants: Dict[str, Tuple[str, List[str]]] = {}
    for variant in args.variant:
        label, _, spec = variant.partition('=')
        source, *flags = spec.split(',')
        variants[f'mujoco {label}'] = (os.path.abspath(source) if source else '', flags)
    kinds = ['do-nothing', 'mujoco', *variants, *(['flat mujoco'] if args.flat else []), 'quad']
    if args.fleet:
        kinds = ['do-nothing'] + [f'mujoco x{n}' for n in args.fleet.split(',')]
    rates: Dict[str, List[float]] = {kind: [] for kind in kinds}
    for round_index in range(args.rounds):
        for kind in kinds:
            rates[kind].append(
                measure(kind, folder, args.seconds, quad_x, variants, args.hover))
            print(f'round {round_index + 1}: {kind:14s} {rates[kind][-1]:6.2f} x real time',
                  flush=True)
    ratios = [m / d for m, d in zip(rates.get('mujoco', []), rates['do-nothing']) if d > 0]
    where = 'at rest, unarmed' if args.hover is None else f'hovering {args.hover:g} m up'
    print(f'\nArduCopter --speedup {SPEEDUP}, {where}, SITL seconds per wall second '
          f'(median of {args.rounds} rounds of {args.seconds:g} s):')
    for kind in kinds:
        print(f'  {kind:14s} {statistics.median(rates[kind]):6.2f} x real time '
              f'(rounds {", ".join(f"{r:.2f}" for r in rates[kind])})')
    for kind in kinds[1:]:
        if kind.startswith('mujoco x') or kind in variants or kind == 'flat mujoco':
            fleet = [m / d for m, d in zip(rates[kind], rates['do-nothing']) if d > 0]
            print(f'{kind} / do-nothing: {statistics.median(fleet):.2f} (rounds '
                  f'{", ".join(f"{r:.2f}" for r in fleet)})')
    if ratios:
        print(f'mujoco / do-nothing: {statistics.median(ratios):.2f} '
              f'(rounds {", ".join(f"{r:.2f}" for r in ratios)}); issue 21 target >= 0.8')


if __name__ == '__main__':
    main()
