"""
The package's ROS processes as users start them, for the tests and the benchmarks.

No pytest here: benchmarks/sitl_speed.py starts the lock-step pair with the tests' own code.
"""

import os
import subprocess
import sys
from typing import IO, List, Union

CONFIG = os.path.join(os.path.dirname(__file__), '..', 'config', 'mujoco_quad_x.yaml')
# Where a process's output goes: a pipe (read with communicate) or an open file.
Output = Union[int, IO[str]]


def start(*arguments: str, environment: dict,
          output: Output = subprocess.PIPE) -> subprocess.Popen:
    """Run `ardupilot-json-bridge ARGUMENTS`, its stdout and stderr together to output."""
    return subprocess.Popen([sys.executable, '-m', 'ardupilot_json_bridge.cli', *arguments],
                            stdout=output, stderr=subprocess.STDOUT, text=True,
                            env=environment)


def lockstep_pair(vehicle: int, instance: int, environment: dict,
                  output: Output = subprocess.PIPE) -> List[subprocess.Popen]:
    """
    Start a paused mujoco_sim and a bridge stepping it, in namespace /lockstep<vehicle>.

    Each pair has a /clock of its own, as mujoco.launch.py gives each vehicle of a fleet: on
    one /clock, a bridge measuring its simulator's step saw the other simulator's clock and
    waited for ever. Both write to output.
    """
    namespace = f'__ns:=/lockstep{vehicle}'
    clock = f'/clock:=/lockstep{vehicle}/clock'
    simulator = start('mujoco-sim', '--ros-args', '-r', namespace, '-r', clock,
                      '-p', 'paused:=true', environment=environment, output=output)
    bridge = start('node', '--ros-args', '-r', namespace, '-r', clock, '--params-file', CONFIG,
                   '-p', 'use_sim_time:=true', '-p', f'instance:={instance}',
                   '-p', 'sim_control:=simulation_interfaces',
                   '-p', 'sim_control_service:=mujoco_sim', environment=environment,
                   output=output)
    return [simulator, bridge]
