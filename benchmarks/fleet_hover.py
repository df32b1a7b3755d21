"""
How many real ArduCopters hover at once in one MuJoCo world at SITL's own speed (issue 21).

    python benchmarks/fleet_hover.py [--vehicles 1,2,3,4] [--hold 20] [--lock /work/heavy.lock]

Needs ARDUPILOT_SITL_DIR (a folder with a prebuilt arducopter and its copter.parm), mujoco and
pymavlink. For each fleet size N, in a child process of its own (killed with all it started
once it is done or outlives --timeout), test/fleet_flight.py serves the quad X fleet of N in
one world on SITL instances --first + k, as `ardupilot-json-bridge mujoco --vehicles N` does,
and flies N real ArduCopters at --speedup (1: real time; copter.parm, then config/quad_x.parm)
at once: EKF ready, GUIDED, arm, take off to 3 + k m, hover --hold s of SITL time, land.
Per vehicle it prints the worst hover error against the target (SITL's GLOBAL_POSITION_INT
relative altitude) and against MuJoCo's truth read at the same moment, SITL's speed over the
hover (SITL seconds per wall second) and the frames the link counted skipped or lost; then the
largest N whose every vehicle hovered within --tolerance of both, and which of those fleets
kept every SITL at 0.98 x its --speedup or more (slower SITLs still fly, later than asked).
"""

import argparse
from contextlib import contextmanager
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from typing import Dict, Iterator, List, Optional

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
sys.path.insert(0, os.path.join(ROOT, 'test'))

import sitl_flight  # noqa: E402

BASE_HEIGHT = 3.0
FAILED_LINES = 6
REAL_TIME = 0.98


def fly(count: int, args: argparse.Namespace) -> List[Dict[str, object]]:
    """Fly a fleet of count and return each vehicle's figures (the child's work)."""
    import fleet_flight
    heights = [BASE_HEIGHT + k for k in range(count)]
    flight = fleet_flight.fly_fleet(heights, args.speedup, args.hold, args.first, args.timeout,
                                    not args.python_frames)
    rows = []
    for index, (height, record) in enumerate(zip(heights, flight.records)):
        row: Dict[str, object] = {'height': height, 'skipped': flight.skipped[index],
                                  'lost': flight.lost[index]}
        flew = record is not None and record.armed and record.reached and record.hover
        if flew:
            row.update(hover_error=record.worst_hover_error(height),
                       truth_error=record.worst_truth_error(), sim=record.sim_seconds,
                       speed=record.sim_seconds / max(record.hover_wall_seconds, 1e-9))
        else:
            stage = ('no flight' if record is None else 'not armed' if not record.armed
                     else 'did not reach its height')
            texts = record.texts[-FAILED_LINES:] if record is not None else []
            row['failed'] = f'{stage}; SITL said {texts}; its log ends: ' + sitl_flight.tail(
                flight.logs[index], FAILED_LINES)
        rows.append(row)
    return rows


@contextmanager
def held(path: Optional[str]) -> Iterator[None]:
    """Hold the machine's heavy-job lock at path (none: nothing to hold) while in the block."""
    if not path:
        yield
        return
    with open(path, 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_child(count: int, args: argparse.Namespace) -> List[Dict[str, object]]:
    """Fly count vehicles in a child process group; kill the group after, whatever happened."""
    command = [sys.executable, os.path.abspath(__file__), '--fly', str(count),
               '--hold', str(args.hold), '--speedup', str(args.speedup),
               '--first', str(args.first), '--timeout', str(args.timeout)]
    if args.python_frames:
        command.append('--python-frames')
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        output, errors = child.communicate(timeout=args.timeout * 2 + 60)
    except subprocess.TimeoutExpired:
        output, errors = '', f'killed after {args.timeout * 2 + 60:.0f} s'
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()
    lines = output.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        failed = f'no figures (status {child.returncode}): ' + sitl_flight.tail(errors, 8)
        return [{'height': BASE_HEIGHT + k, 'failed': failed} for k in range(count)]


def within(rows: List[Dict[str, object]], tolerance: float) -> bool:
    return all('failed' not in row and row['hover_error'] < tolerance
               and row['truth_error'] < tolerance for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--vehicles', default='1,2,3,4', help='fleet sizes, in order')
    parser.add_argument('--hold', type=float, default=20.0, help='hover, s of SITL time')
    parser.add_argument('--speedup', type=float, default=1.0)
    parser.add_argument('--first', type=int, default=3, help='first SITL instance')
    parser.add_argument('--timeout', type=float, default=300.0, help='one flight, wall s')
    parser.add_argument('--tolerance', type=float, default=0.5, help='m, issue 21')
    parser.add_argument('--lock', help='hold this flock file while each fleet flies')
    parser.add_argument('--python-frames', action='store_true',
                        help='serve every frame in Python (as mujoco --python-frames)')
    parser.add_argument('--fly', type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fly:
        print(json.dumps(fly(args.fly, args)))
        return
    # A `timeout` around the benchmark: still kill the fleet flying in its own process group.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit('fleet_hover: stopped by SIGTERM'))
    if sitl_flight.sitl_binary() is None:
        sys.exit(f'set {sitl_flight.SITL_DIR_VARIABLE} to a folder with a prebuilt arducopter')
    print(f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}: ArduCopter --speedup '
          f'{args.speedup:g}, hover {args.hold:g} s of SITL time, vehicle k to {BASE_HEIGHT:g} '
          f'+ k m', flush=True)
    flying, real_time = [], []
    for count in [int(n) for n in args.vehicles.split(',')]:
        with held(args.lock):
            load = os.getloadavg()
            started = time.monotonic()
            rows = run_child(count, args)
            wall = time.monotonic() - started
        print(f'\n{count} vehicle(s), load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} '
              f'at the start, {wall:.0f} s:', flush=True)
        for index, row in enumerate(rows):
            if 'failed' in row:
                print(f'  vehicle {index} ({row["height"]:g} m): {row["failed"]}')
                continue
            print(f'  vehicle {index} ({row["height"]:g} m): worst error {row["hover_error"]:.3f}'
                  f' m, against MuJoCo {row["truth_error"]:.3f} m; SITL {row["speed"]:.2f} x '
                  f'real time over {row["sim"]:.1f} s of hover; {row["skipped"]} frames skipped,'
                  f' {row["lost"]} lost', flush=True)
        if within(rows, args.tolerance):
            flying.append(count)
            if all(row['speed'] >= REAL_TIME * args.speedup for row in rows):
                real_time.append(count)
    print(f'\nevery vehicle within {args.tolerance:g} m of its target and of MuJoCo with '
          f'{", ".join(map(str, flying)) or "none"} vehicle(s); the largest: '
          f'{max(flying, default=0)}; of those, every SITL at {REAL_TIME:g} x its speedup or '
          f'more with {", ".join(map(str, real_time)) or "none"}')


if __name__ == '__main__':
    main()
