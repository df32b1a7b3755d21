"""
Hover real ArduCopter for a long time and watch the bridge's memory, CPU and link (issue 33).

    ARDUPILOT_SITL_DIR=../shared/tools/ardupilot python benchmarks/long_flight.py engine \
        [--minutes 60] [--instance 40] [--height 5]
    ARDUPILOT_SITL_DIR=../shared/tools/ardupilot python benchmarks/long_flight.py node \
        [--minutes 60] [--instance 41] [--real-time-factor 0.5]

engine: `ardupilot-json-bridge mujoco --instance N` (the lock-step engine) serves SITL; it runs
in a child process of this script that calls the command's own main(), only keeping hold of
the link it makes so that its counters can be printed each minute. node: `ardupilot-json-bridge
mujoco-sim` (free-running, paced at --real-time-factor) and `ardupilot-json-bridge node` in a
namespace of their own, on simulated time; the link's counters come from the node's
/diagnostics. Either way real ArduCopter (sitl_flight.Sitl: a quad X, --speedup 1) takes off
in GUIDED to --height and hovers for --minutes of wall time, then lands.

Every minute it prints the bridge's resident memory and CPU (its whole process tree: the node's
link process too), SITL's CPU, the worst hover error of that minute (SITL's own altitude against
the target) and the link's counters. At the end: the memory's slope after --warmup minutes
(least squares), the warning and error lines the bridge logged, and the frames it left
unanswered. Figures taken on a busy machine say how the bridge holds up, not how fast it is.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, '..')
sys.path.insert(0, os.path.join(ROOT, 'test'))

from proc_stats import tree_cpu_seconds, tree_rss_bytes  # noqa: E402
from ros_diagnostics import DiagnosticsWatch  # noqa: E402
import sitl_flight  # noqa: E402

CONFIG = os.path.join(ROOT, 'config', 'mujoco_quad_x.yaml')
STATS_MARK = 'LONG_FLIGHT_STATS '
STATS_PERIOD = 10.0
# The start of a log line at warning level or worse: Python's logging (the engine) or rclpy's.
WARNING_LINE = re.compile(r'^\[(WARN|WARNING|ERROR|FATAL|CRITICAL)\]|Traceback')


def serve_engine(instance: int) -> int:
    """
    Run `ardupilot-json-bridge mujoco --instance instance`, printing its link's counters.

    The command's own main() makes the link; a subclass of SitlLink, put where the command
    looks it up, keeps the one it makes so that a thread can print its summary every
    STATS_PERIOD s on stdout (one JSON line after STATS_MARK).
    """
    from ardupilot_json_bridge import cli
    made: List = []

    class KeptLink(cli.SitlLink):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    cli.SitlLink = KeptLink

    def report() -> None:
        while True:
            time.sleep(STATS_PERIOD)
            if made:
                print(STATS_MARK + json.dumps(made[0].stats.summary()), flush=True)

    threading.Thread(target=report, daemon=True).start()
    return cli.main(['mujoco', '--instance', str(instance)])


class Bridge:
    """The bridge's processes, their output in one log file each, and its link's counters."""

    def __init__(self, mode: str, instance: int, real_time_factor: float, folder: str) -> None:
        self.mode = mode
        self.processes: Dict[str, subprocess.Popen] = {}
        self.logs: Dict[str, str] = {}
        self.watch: Optional[DiagnosticsWatch] = None
        if mode == 'engine':
            self._start('engine', [sys.executable, os.path.abspath(__file__), 'engine',
                                   '--serve', '--instance', str(instance)], folder)
            return
        namespace = f'long_flight_{instance}'
        ros = ['--ros-args', '-r', f'__ns:=/{namespace}']
        self._start('mujoco_sim', bridge_command(
            'mujoco-sim', *ros, '-p', f'real_time_factor:={real_time_factor}'), folder)
        self._start('node', bridge_command(
            'node', *ros, '--params-file', CONFIG, '-p', 'use_sim_time:=true',
            '-p', f'instance:={instance}'), folder)
        from ardupilot_json_bridge.config import NODE_NAME
        self.watch = DiagnosticsWatch(f'{namespace}/{NODE_NAME}')

    def _start(self, name: str, command: List[str], folder: str) -> None:
        self.logs[name] = os.path.join(folder, f'{name}.log')
        with open(self.logs[name], 'w') as log:
            self.processes[name] = subprocess.Popen(command, stdout=log,
                                                    stderr=subprocess.STDOUT, text=True)

    def pid(self) -> int:
        """Return the bridge's own process: the engine, or the node (its link is a child)."""
        return self.processes['engine' if self.mode == 'engine' else 'node'].pid

    def cpu_seconds(self) -> Dict[str, float]:
        return {name: tree_cpu_seconds(p.pid) for name, p in self.processes.items()}

    def rss_megabytes(self) -> Dict[str, float]:
        return {name: tree_rss_bytes(p.pid) / 1e6 for name, p in self.processes.items()}

    def output(self, name: str) -> str:
        with open(self.logs[name], errors='replace') as stream:
            return stream.read()

    def link(self) -> Dict[str, object]:
        """Return the link's latest counters: the engine's summary or the node's diagnostics."""
        if self.watch is not None:
            return dict(self.watch.values)
        lines = [line for line in self.output('engine').splitlines()
                 if line.startswith(STATS_MARK)]
        return json.loads(lines[-1][len(STATS_MARK):]) if lines else {}

    def warnings(self) -> List[str]:
        """Every line at warning level or worse (or a traceback) any bridge process printed."""
        return [f'{name}: {line}' for name in self.processes
                for line in self.output(name).splitlines() if WARNING_LINE.search(line)]

    def dead(self) -> Optional[str]:
        """Name the first bridge process that has exited, with its status, or None."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                return f'{name} exited with status {process.returncode}'
        return None

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.close()
        for process in self.processes.values():
            process.send_signal(signal.SIGINT)
        for name, process in self.processes.items():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def bridge_command(*arguments: str) -> List[str]:
    return [sys.executable, '-m', 'ardupilot_json_bridge.cli', *arguments]


def slope(points: Sequence[Tuple[float, float]]) -> Optional[float]:
    """Least-squares slope of (x, y) points; None with fewer than two distinct x."""
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def counters_line(values: Dict[str, object]) -> str:
    """Return the link's counters in one line, latency and addresses left out."""
    kept = {key: value for key, value in values.items()
            if not key.startswith('latency') and key not in ('peer', 'sitl_address', 'port')}
    return ', '.join(f'{key} {value}' for key, value in kept.items()) or 'none yet'


def hover(args: argparse.Namespace, bridge: Bridge, sitl: sitl_flight.Sitl) -> int:
    """Take off, hover --minutes printing each minute's figures, land; 0 if all went well."""
    started = time.monotonic()
    flight = sitl_flight.Flight(sitl)
    timeout = sitl_flight.FLIGHT_TIMEOUT / args.real_time_factor
    try:
        if not flight.wait_ready(timeout / 2) or not flight.arm(timeout / 4):
            print(f'SITL did not get ready or arm; it said {flight.record.texts[-10:]}')
            return 1
        flight.takeoff(args.height)
        if not flight.wait(lambda: flight.relative_alt > args.height - 0.3, timeout / 4):
            print(f'SITL did not reach {args.height:g} m; it said {flight.record.texts[-10:]}')
            return 1
        print(f'{elapsed(started)} at {flight.relative_alt:.2f} m: hovering '
              f'{args.minutes:g} min', flush=True)
        memory: List[Tuple[float, float]] = []
        before_hover = len(bridge.warnings())
        hover_started = time.monotonic()
        cpu_before, sitl_before = bridge.cpu_seconds(), tree_cpu_seconds(sitl.process.pid)
        boot_before, texts_before = flight.boot_ms, len(flight.record.texts)
        worst_ever = 0.0
        for minute in range(1, int(round(args.minutes)) + 1):
            worst = 0.0
            while time.monotonic() < hover_started + 60.0 * minute:
                flight.pump(0.05)
                worst = max(worst, abs(flight.relative_alt - args.height))
                gone = bridge.dead()
                if gone:
                    print(f'{elapsed(started)} {gone}: stopped')
                    return 1
            worst_ever = max(worst_ever, worst)
            cpu, sitl_cpu = bridge.cpu_seconds(), tree_cpu_seconds(sitl.process.pid)
            rss = bridge.rss_megabytes()
            memory.append((minute, rss[bridge.mode if bridge.mode == 'engine' else 'node']))
            print(f'minute {minute}: RSS ' + ', '.join(
                f'{name} {megabytes:.1f} MB' for name, megabytes in rss.items()) + '; CPU '
                + ', '.join(f'{name} {(cpu[name] - cpu_before[name]) / 60.0:.1%}'
                            for name in cpu)
                + f', SITL {(sitl_cpu - sitl_before) / 60.0:.1%}; SITL time '
                f'{(flight.boot_ms - boot_before) / 1000.0:.1f} s this minute; worst hover '
                f'error {worst:.3f} m; warnings {len(bridge.warnings()) - before_hover}; link: '
                f'{counters_line(bridge.link())}', flush=True)
            said = flight.record.texts[texts_before:]
            if said:   # an EKF failsafe, a mode change: why a hover error grew
                print(f'  SITL said: {" | ".join(said)}; armed: {flight.mav.motors_armed()}',
                      flush=True)
            cpu_before, sitl_before, boot_before = cpu, sitl_cpu, flight.boot_ms
            texts_before = len(flight.record.texts)
        flight.set_mode('LAND')
        landed = flight.wait(lambda: not flight.mav.motors_armed(), timeout / 4)
    finally:
        flight.close()
    summarise(args, bridge, memory, worst_ever, landed, before_hover)
    return 0 if landed else 1


def summarise(args: argparse.Namespace, bridge: Bridge, memory: List[Tuple[float, float]],
              worst: float, landed: bool, before_hover: int) -> None:
    """Print the end's figures: memory slope after warm-up, warnings, unanswered frames."""
    warm = [(minute, rss) for minute, rss in memory if minute > args.warmup]
    per_minute = slope(warm)
    link = bridge.link()
    warnings = bridge.warnings()
    name = 'engine' if bridge.mode == 'engine' else 'node (and its link process)'
    print(f'\n{bridge.mode}: {len(memory)} minutes of hover, worst hover error {worst:.3f} m, '
          f'{"landed" if landed else "did NOT land"}')
    if per_minute is None:
        print(f'memory of the {name}: too few minutes after the {args.warmup:g}-minute warm-up '
              'for a slope')
    else:
        print(f'memory of the {name} after the {args.warmup:g}-minute warm-up: '
              f'{warm[0][1]:.1f} MB at minute {warm[0][0]:g}, {warm[-1][1]:.1f} MB at minute '
              f'{warm[-1][0]:g}; slope {per_minute * 1000:+.1f} kB/min '
              f'({per_minute * 60:+.2f} MB/h)')
    print(f'warning or error lines logged: {len(warnings)}, {len(warnings) - before_hover} of '
          'them during the hover')
    for line in warnings[:10]:
        print(f'  {line}')
    print(f'unanswered frames: {link.get("unanswered", "unknown")}; link at the end: '
          f'{counters_line(link)}', flush=True)


def elapsed(started: float) -> str:
    return f'[{time.monotonic() - started:.0f} s]'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('mode', choices=['engine', 'node'])
    parser.add_argument('--minutes', type=float, default=60.0, help='hover, wall minutes')
    parser.add_argument('--instance', type=int, default=40, help='SITL instance')
    parser.add_argument('--height', type=float, default=5.0, help='hover height, m')
    parser.add_argument('--warmup', type=float, default=5.0,
                        help='minutes left out of the memory slope')
    parser.add_argument('--real-time-factor', type=float, default=sitl_flight.REAL_TIME_FACTOR,
                        help="node: mujoco_sim's pace (a busy machine: 0.5)")
    parser.add_argument('--serve', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve_engine(args.instance)
    if sitl_flight.sitl_binary() is None:
        print(f'needs real SITL: set {sitl_flight.SITL_DIR_VARIABLE}')
        return 1
    if args.mode == 'engine':
        args.real_time_factor = 1.0   # lock-step: SITL's own pace
    # Stopped by SIGTERM (a `timeout`, kill): still stop SITL and the bridge on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit('long_flight: stopped by SIGTERM'))
    print(f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}: ArduCopter hovering at '
          f'{args.height:g} m for {args.minutes:g} min through the {args.mode} on SITL '
          f'instance {args.instance}' + (f', mujoco_sim at real_time_factor '
                                         f'{args.real_time_factor:g}'
                                         if args.mode == 'node' else '')
          + f'; load average {os.getloadavg()[0]:.2f}', flush=True)
    with tempfile.TemporaryDirectory(prefix='long-flight-') as folder:
        bridge = Bridge(args.mode, args.instance, args.real_time_factor, folder)
        try:
            with sitl_flight.Sitl(instance=args.instance) as sitl:
                try:
                    return hover(args, bridge, sitl)
                except sitl_flight.SitlDied as error:
                    print(error)
                    return 1
        finally:
            bridge.stop()
            for name in bridge.processes:
                print(f'{name}, last lines:\n{sitl_flight.tail(bridge.output(name), 8)}')


if __name__ == '__main__':
    sys.exit(main())
