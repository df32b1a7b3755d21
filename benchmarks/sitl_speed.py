"""
How fast real ArduCopter runs in lock-step with each backend, side by side in one run.

    python benchmarks/sitl_speed.py [--seconds 12] [--rounds 3] [--flat]
                                    [--backends do-nothing,mujoco,node-lockstep,quad]
                                    [--variant LABEL=DIR[,FLAG...]]

Needs ARDUPILOT_SITL_DIR (a folder with a prebuilt arducopter and its copter.parm) and
pymavlink. Each backend flies the same SITL at --speedup 100 for --seconds of wall time, in
rounds that alternate the backends; the figure is SITL's own clock (SYSTEM_TIME over MAVLink)
per wall second:
1. do-nothing: a Python JSON backend answering every frame with a pre-formatted reply of a
   vehicle at rest (only the timestamp changes): the ceiling of any Python lock-step backend;
2. mujoco: `ardupilot-json-bridge mujoco`, the built-in engine, with its live checks;
3. node-lockstep: lock-step through ROS, a paused `mujoco-sim` stepped by the bridge node
   (sim_control simulation_interfaces), started as test/test_node_lockstep.py starts them;
   also the node's closing step round trip (request to answer). Needs rclpy and
   simulation_interfaces (a sourced ROS 2): left out, in one line, where they are missing.
   The free-running node (sim_control none) is not flown: SITL follows the simulator's
   clock, so its speed is mujoco-sim's real_time_factor by construction;
4. quad: SITL's built-in `--model quad`, no backend at all;
5. with --flat, flat mujoco: the quad X flown by this file's own minimal Python backend (no
   checks, histories or session rules), the floor of a Python MuJoCo lock-step frame; and
   flat C mujoco: the same frame in C (flat_mujoco.c, built here against the mujoco wheel's
   headers and library with the system's C compiler), the floor of a compiled frame.
--backends picks among do-nothing, mujoco, node-lockstep and quad (all by default).
The mujoco figure as a ratio to the do-nothing one is what issue 21 asks to be >= 0.8.
Each --variant adds `mujoco LABEL` to the rounds: the package imported from DIR (a checkout,
e.g. `git archive main | tar -x -C /tmp/main`) with the mujoco command's FLAGs, so a change
is measured before and after in one run.
"""

import argparse
import atexit
import glob
import importlib.util
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, IO, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test'))

from node_processes import lockstep_pair  # noqa: E402
from proc_stats import children, cpu_seconds  # noqa: E402
import sitl_flight  # noqa: E402

SPEEDUP = 100
# SITL's JSON frames per second of its own clock (the default SIM_RATE_HZ of ArduCopter).
FRAME_RATE = 1200
WARMUP = 3.0
MAGIC_16 = 18458
BACKENDS = ('do-nothing', 'mujoco', 'node-lockstep', 'quad')
# What node-lockstep needs beyond this file's own (the modules, and how to get them).
NODE_LOCKSTEP_NEEDS = {'rclpy': 'ROS 2 (source it)',
                       'simulation_interfaces': 'apt install '
                                                'ros-$ROS_DISTRO-simulation-interfaces',
                       'mujoco': 'pip install mujoco'}
# How long the pair may take to be stepping before SITL starts (s).
LOCKSTEP_START = 90.0
# The shipped vehicles' models (the flat backends fly the quad X).
MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'ardupilot_json_bridge',
                      'sources', 'models')
LOCKSTEP_LINE = 'lock-step through ROS with the simulator'
# The node's closing line on its step requests (ros/sim_control.py's summary).
ROUND_TRIP = re.compile(r'sim_control: (?:\d+ step requests.*|no step requested)')
# Node log lines worth reporting: frames left to SITL's resend, warnings, errors.
TROUBLE = re.compile(r'no reply to SITL frame|SITL sent frame|\[(?:WARN|ERROR|FATAL)\]|'
                     r'Traceback')
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
    model = os.path.join(MODELS, 'quad_x.xml')
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


def build_flat_c(folder: str) -> Tuple[Optional[str], str]:
    """Build flat_mujoco.c against the installed mujoco wheel in folder: the binary, or why not."""
    compiler = shlex.split(os.environ.get('CC', 'cc'))
    if not compiler or shutil.which(compiler[0]) is None:
        return None, f'no C compiler ({" ".join(compiler) or "$CC"}) on PATH'
    import mujoco  # flat_backends found it
    wheel = os.path.dirname(mujoco.__file__)
    library = sorted(glob.glob(os.path.join(wheel, 'libmujoco.so*')))
    if not library or not os.path.isdir(os.path.join(wheel, 'include')):
        return None, f'the mujoco package in {wheel} ships no headers or library'
    binary = os.path.join(folder, 'flat_mujoco')
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'flat_mujoco.c')
    built = subprocess.run(
        compiler + ['-O2', '-o', binary, source, '-I' + os.path.join(wheel, 'include'),
                    library[0], '-Wl,-rpath,' + wheel, '-lm'], capture_output=True, text=True)
    if built.returncode:
        lines = built.stderr.strip().splitlines() or ['no message']
        said = next((line for line in lines if 'error' in line), lines[-1])
        return None, f'{" ".join(compiler)} failed: {said.strip()}'
    return binary, ''


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


def node_lockstep_missing() -> Optional[str]:
    """Return what node-lockstep needs and is not installed, in one line; None if nothing."""
    missing = [f'{name} ({how})' for name, how in NODE_LOCKSTEP_NEEDS.items()
               if importlib.util.find_spec(name) is None]
    return 'missing ' + ', '.join(missing) if missing else None


def ros_environment() -> Dict[str, str]:
    """Return the environment for the ROS pair: this checkout first, a ROS domain of its own."""
    environment = dict(os.environ)
    checkout = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    environment['PYTHONPATH'] = os.pathsep.join(
        [os.path.abspath(checkout)]
        + [p for p in environment.get('PYTHONPATH', '').split(os.pathsep) if p])
    environment.setdefault('ROS_DOMAIN_ID', str(random.randint(1, 101)))
    environment.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    return environment


def wait_for_line(log: str, line: str, processes: Sequence[subprocess.Popen],
                  limit: float) -> Optional[str]:
    """Wait until log holds line; return why not (a process ended, limit s passed) or None."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with open(log, errors='replace') as stream:
            if line in stream.read():
                return None
        ended = [p for p in processes if p.poll() is not None]
        if ended:
            return f'a process of the pair ended (exit status {ended[0].returncode})'
        time.sleep(0.2)
    return f'not stepping after {limit:g} s'


def node_report(log: str) -> List[str]:
    """Return the node's step round trip line and its trouble lines (counted, first three)."""
    with open(log, errors='replace') as stream:
        text = stream.read()
    said = [match.group(0) for match in ROUND_TRIP.finditer(text)]
    stepping = text.partition(LOCKSTEP_LINE)[2]
    trouble = [line.strip() for line in stepping.splitlines() if TROUBLE.search(line)]
    lines = [said[-1] if said else 'no step round trip logged (the node did not close cleanly?)']
    if trouble:
        lines.append(f'{len(trouble)} warning, error or resend line(s) once stepping, first: '
                     + ' | '.join(line[:160] for line in trouble[:3]))
    return lines


def stop_all(processes: Sequence[Optional[subprocess.Popen]]) -> None:
    """Terminate each process in turn, killing one not gone in 15 s."""
    for process in processes:
        if process is not None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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


def start_backend(kind: str, variants: Dict[str, Tuple[str, List[str]]], flat_c: Optional[str],
                  vehicles: int, log: Optional[str],
                  output: Optional[IO[str]]) -> Tuple[List[subprocess.Popen], Optional[str]]:
    """
    Start kind's backend processes; return them and, if they cannot serve, why not.

    flat_c: the flat C backend's binary (build_flat_c), for kind 'flat C mujoco'.
    """
    if kind == 'node-lockstep':
        pair = lockstep_pair(0, 0, ros_environment(), output=output)
        return pair, wait_for_line(log, LOCKSTEP_LINE, pair, LOCKSTEP_START)
    if kind.startswith('mujoco'):
        source, flags = variants.get(kind, (None, []))
        processes = [mujoco_backend(vehicles, source, flags, log)]
    elif kind == 'flat C mujoco' and flat_c is not None:
        processes = [subprocess.Popen([flat_c, os.path.join(MODELS, 'quad_x.xml')])]
    else:
        child = {'do-nothing': do_nothing_backend,
                 'flat mujoco': flat_mujoco_backend}.get(kind, lambda: None)()
        processes = [child] if child else []
    time.sleep(1.0 if processes else 0.0)
    return processes, None


def watched(kind: str, backend: List[subprocess.Popen]) -> List[Tuple[str, int]]:
    """Return the backend's processes to time, each with its name in the output."""
    if kind != 'node-lockstep':
        return [('backend', process.pid) for process in backend]
    simulator, node = backend
    links = children(node.pid)   # the link process, started with the node
    return [('mujoco-sim', simulator.pid), ('node', node.pid)] + [
        ('its link process', pid) for pid in links[:1]]


def measure(kind: str, folder: str, seconds: float, quad_x: Optional[str],
            variants: Dict[str, Tuple[str, List[str]]], hover: Optional[float] = None,
            flat_c: Optional[str] = None) -> float:
    """
    SITL instance 0's clock rate with backend kind (mujoco xN: a fleet of N, N SITLs).

    At rest and unarmed, or with hover, hovering at that altitude (m).
    """
    scratch = tempfile.mkdtemp(prefix='sitl-speed-')
    vehicles = int(kind.split('x')[-1]) if kind.startswith('mujoco x') else 1
    logged = kind.startswith('mujoco') or kind == 'node-lockstep'
    log = os.path.join(scratch, 'backend.log') if logged else None
    # The ROS pair writes to the log itself (python -m ...cli, stdout and stderr).
    output = open(log, 'w') if kind == 'node-lockstep' else None
    backend: List[subprocess.Popen] = []
    sitls: List[subprocess.Popen] = []
    try:
        backend, failed = start_backend(kind, variants, flat_c, vehicles, log, output)
        if failed:
            print(f'    {kind}: {failed}', flush=True)
            return 0.0
        model = 'quad' if kind == 'quad' else 'JSON:127.0.0.1'
        sitls = [start_sitl(folder, model, scratch, quad_x, k) for k in range(vehicles)]
        names = watched(kind, backend) + [('SITL', sitls[0].pid)]
        pids = [pid for _, pid in names]
        if hover is None:
            rate, cpu = sim_rate(seconds, pids)
        else:
            rate, cpu, heights = hover_rate(sitls[0], seconds, pids, hover,
                                            climbs=kind != 'do-nothing')
            print(f'    {heights}', flush=True)
        if backend:
            frames = FRAME_RATE  # SITL frames per SITL second
            parts = [f'{name} {per_frame(used, frames)}' for (name, _), used in zip(names, cpu)]
            if len(names) > 2:
                own = cpu[:-1]
                parts.append('the backend processes together ' + per_frame(
                    None if None in own else sum(own), frames))
            print(f'    CPU per SITL frame: {", ".join(parts)}', flush=True)
        return rate
    finally:
        # SITL first; then the node before its simulator, so a step in flight is answered.
        stop_all(sitls + list(reversed(backend)))
        if output is not None:
            output.close()
        if kind == 'node-lockstep':
            for line in node_report(log):
                print(f'    {line}', flush=True)
        else:
            guesses = stepped_ahead(log) if log else None
            if guesses:
                print(f'    {guesses}', flush=True)
        shutil.rmtree(scratch, ignore_errors=True)


def flat_backends(wanted: bool) -> Tuple[List[str], Optional[str]]:
    """
    Return the flat backends that can fly (--flat) and the flat C one's binary, if built.

    Each that cannot is left out in one line; the C one is built once, in a folder removed at
    exit.
    """
    if not wanted:
        return [], None
    if importlib.util.find_spec('mujoco') is None:
        print('flat mujoco and flat C mujoco left out: pip install mujoco', flush=True)
        return [], None
    folder = tempfile.mkdtemp(prefix='flat-c-')
    atexit.register(shutil.rmtree, folder, True)
    binary, failed = build_flat_c(folder)
    if binary is None:
        print(f'flat C mujoco left out: {failed}', flush=True)
        return ['flat mujoco'], None
    return ['flat mujoco', 'flat C mujoco'], binary


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
    parser.add_argument('--backends', default=','.join(BACKENDS),
                        help='the backends to fly, of ' + ', '.join(BACKENDS) + ' (default: '
                             'all; node-lockstep left out, in one line, without ROS 2)')
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
    chosen = [name.strip() for name in args.backends.split(',') if name.strip()]
    unknown = [name for name in chosen if name not in BACKENDS]
    if unknown:
        parser.error(f'--backends: unknown {", ".join(unknown)} (of {", ".join(BACKENDS)})')
    missing = node_lockstep_missing() if 'node-lockstep' in chosen and not args.fleet else None
    if missing:
        print(f'node-lockstep left out: {missing}', flush=True)
        chosen.remove('node-lockstep')
    flat, flat_c = flat_backends(args.flat)
    extra = [*variants, *flat]
    kinds = [name for name in chosen if name != 'quad'] + extra + [
        name for name in chosen if name == 'quad']
    if args.fleet:
        kinds = ['do-nothing'] + [f'mujoco x{n}' for n in args.fleet.split(',')]
    rates: Dict[str, List[float]] = {kind: [] for kind in kinds}
    for round_index in range(args.rounds):
        for kind in kinds:
            rates[kind].append(
                measure(kind, folder, args.seconds, quad_x, variants, args.hover, flat_c))
            print(f'round {round_index + 1}: {kind:14s} {rates[kind][-1]:6.2f} x real time',
                  flush=True)
    baseline = rates.get('do-nothing', [])
    ratios = [m / d for m, d in zip(rates.get('mujoco', []), baseline) if d > 0]
    where = 'at rest, unarmed' if args.hover is None else f'hovering {args.hover:g} m up'
    print(f'\nArduCopter --speedup {SPEEDUP}, {where}, SITL seconds per wall second '
          f'(median of {args.rounds} rounds of {args.seconds:g} s):')
    for kind in kinds:
        print(f'  {kind:14s} {statistics.median(rates[kind]):6.2f} x real time '
              f'(rounds {", ".join(f"{r:.2f}" for r in rates[kind])})')
    for kind in kinds[1:]:
        if kind.startswith('mujoco x') or kind in variants or kind in (
                'flat mujoco', 'flat C mujoco', 'node-lockstep'):
            fleet = [m / d for m, d in zip(rates[kind], baseline) if d > 0]
            if fleet:
                print(f'{kind} / do-nothing: {statistics.median(fleet):.2f} (rounds '
                      f'{", ".join(f"{r:.2f}" for r in fleet)})')
    engine = [n / m for n, m in zip(rates.get('node-lockstep', []), rates.get('mujoco', []))
              if m > 0]
    if engine:
        print(f'node-lockstep / mujoco: {statistics.median(engine):.2f} '
              f'(rounds {", ".join(f"{r:.2f}" for r in engine)})')
    if 'node-lockstep' in kinds:
        print('free-running node (sim_control none): not flown; SITL follows the '
              "simulator's clock, so its speed is mujoco-sim's real_time_factor (1 by "
              'default) by construction')
    if ratios:
        print(f'mujoco / do-nothing: {statistics.median(ratios):.2f} '
              f'(rounds {", ".join(f"{r:.2f}" for r in ratios)}); issue 21 target >= 0.8')


if __name__ == '__main__':
    main()
