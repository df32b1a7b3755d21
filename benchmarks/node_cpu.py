"""
CPU of the bridge node against a bare rclpy subscriber, side by side, with real SITL.

    ARDUPILOT_SITL_DIR=../shared/tools/ardupilot python benchmarks/node_cpu.py [--seconds 20]

For each simulator rate (IMU 1000 Hz and 250 Hz, odometry 250 Hz) it starts, in one ROS
domain: `mujoco-sim` (free-running, real time), the bridge node (`ardupilot-json-bridge node`)
with real ArduCopter SITL on it (disarmed, logging), and benchmarks/bare_subscriber.py on the
same topics. After a warm-up it measures each process tree's CPU over the same window, then
reads SITL's own figures from its dataflash log: gyro sample rate (IMU.GHz) and loop rate
(PM.LR). Prints the node's CPU as a ratio to the bare subscriber's.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, '..')
sys.path.insert(0, os.path.join(ROOT, 'test'))

from proc_stats import children, tree_cpu_seconds  # noqa: E402
import sitl_flight  # noqa: E402

CONFIG = os.path.join(ROOT, 'config', 'mujoco_quad_x.yaml')
INSTANCE = 4


def bridge_command(*arguments: str) -> List[str]:
    return [sys.executable, '-m', 'ardupilot_json_bridge.cli', *arguments]


def measure(imu_rate: float, odom_rate: float, seconds: float, warmup: float) -> Dict:
    # The caller's domain, else one of its own: another run on the machine must not be heard.
    environment = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
                       ROS_DOMAIN_ID=os.environ.get('ROS_DOMAIN_ID',
                                                    str(random.randint(1, 101))))
    namespace = ['--ros-args', '-r', '__ns:=/bench']
    quiet = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
    sim = subprocess.Popen(bridge_command('mujoco-sim', *namespace, '-p',
                                          f'imu_rate:={imu_rate}', '-p',
                                          f'odom_rate:={odom_rate}'), **quiet)
    node = subprocess.Popen(bridge_command('node', *namespace, '--params-file', CONFIG,
                                           '-p', 'use_sim_time:=true', '-p',
                                           f'instance:={INSTANCE}'), **quiet)
    bare = subprocess.Popen([sys.executable, os.path.join(HERE, 'bare_subscriber.py'),
                             *namespace, '-p', 'use_sim_time:=true'], **quiet)
    processes = {'mujoco_sim': sim, 'node': node, 'bare': bare}
    try:
        with sitl_flight.Sitl(instance=INSTANCE, extra_parameters='LOG_DISARMED 1\n') as sitl:
            processes['sitl'] = sitl.process
            time.sleep(warmup)
            before = {name: tree_cpu_seconds(p.pid) for name, p in processes.items()}
            link_children = children(node.pid)
            link_before = sum(map(tree_cpu_seconds, link_children))
            started = time.monotonic()
            time.sleep(seconds)
            elapsed = time.monotonic() - started
            cpu = {name: (tree_cpu_seconds(p.pid) - before[name]) / elapsed
                   for name, p in processes.items()}
            cpu['link_process'] = (sum(map(tree_cpu_seconds, link_children))
                                   - link_before) / elapsed
            gyro_rate, loop_rate, long_loops = sitl.figures()
            sitl_log = sitl.log()
    finally:
        outputs = {name: sitl_flight.stopped(processes[name])
                   for name in ('bare', 'node', 'mujoco_sim')}
    report = json.loads(outputs['bare'].strip().splitlines()[-1])
    return {'cpu': cpu, 'gyro_rate': gyro_rate, 'loop_rate': loop_rate,
            'long_loops': long_loops, 'bare': report,
            'skips': outputs['node'].count('behind physics'),
            'slow': sitl_log.count('Main loop slow')}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=20.0)
    parser.add_argument('--warmup', type=float, default=15.0)
    parser.add_argument('--imu-rates', type=float, nargs='+', default=[1000.0, 250.0])
    args = parser.parse_args()
    if sitl_flight.sitl_binary() is None:
        print(f'needs real SITL: set {sitl_flight.SITL_DIR_VARIABLE}')
        return 1
    for imu_rate in args.imu_rates:
        result = measure(imu_rate, 250.0, args.seconds, args.warmup)
        cpu, link = result['cpu'], result['bare']['link']
        print(f'IMU {imu_rate:.0f} Hz, odometry 250 Hz, {args.seconds:.0f} s:')
        print(f'  CPU (share of one core): node {cpu["node"]:.1%}, bare subscriber '
              f'{cpu["bare"]:.1%} -> ratio {cpu["node"] / cpu["bare"]:.2f} x (of the node: link '
              f'process {cpu["link_process"]:.1%}); '
              f'mujoco_sim {cpu["mujoco_sim"]:.1%}, SITL {cpu["sitl"]:.1%}')
        print(f'  bare subscriber received: {result["bare"]["counts"]}')
        print(f'  link (node diagnostics): {link.get("frame_rate_hz")} frames/s, '
              f'skipped {link.get("skipped")}, unanswered {link.get("unanswered")}, '
              f'latency p50 {link.get("latency_p50_us")} us')
        print(f'  SITL: gyro rate {result["gyro_rate"]} Hz, loop rate {result["loop_rate"]} Hz, '
              f'long loops {result["long_loops"]}, "Main loop slow" x{result["slow"]}; '
              f'node "behind physics" lines: {result["skips"]}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
