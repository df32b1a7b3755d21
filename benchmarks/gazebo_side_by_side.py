"""
The same iris in the same Gazebo world, flown by ardupilot_gazebo's plugin and by this bridge.

    source /opt/gz/harmonic/activate.sh && source install/setup.bash   # ros_gz, this package
    export GZ_SIM_RESOURCE_PATH=<a loadable iris_with_standoffs>:$GZ_SIM_RESOURCE_PATH
    ARDUPILOT_SITL_DIR=<arducopter, copter.parm> python benchmarks/gazebo_side_by_side.py \
        [--rounds 3] [--hold 60] [--altitude 5] [--setups plugin,bridge,plugin:0.5,...]

Each round flies each setup once, in turn, with real ArduCopter (copter.parm + the project's
quad_x.parm: the iris is a quad X), GUIDED takeoff to --altitude, a --hold s position hold,
LAND. The worlds are benchmarks/iris_worlds.py's, written into a scratch folder from the
installed iris_with_ardupilot model:
- plugin: `gz sim -s -r` with the model as it is: its ArduPilotPlugin in lock-step with SITL
  inside Gazebo, at real time (SITL --speedup 1); `plugin:0.5`: at half the wall clock (`-z`
  for the world's step, as gazebo.launch.py's real_time_factor);
- bridge: gazebo.launch.py (server only, real_time_factor 1) with the ArduPilotPlugin replaced
  by JointControllers driven through ros_gz_bridge by the bridge's float64 outputs, free
  running at real time as the plugin's world runs (`bridge:0.5`: at half the wall clock);
- bridge-lockstep: the same, stepped by the bridge through the world's ControlWorld service
  (sim_control:=gz_control_world, SITL --speedup 100);
- bridge-actuators (and bridge-actuators-lockstep, bridge-actuators:RTF): the four rotor speeds
  in one actuator_msgs/Actuators, each JointController reading its element, instead of one
  std_msgs/Float64 per rotor.
Both are judged the same way, on Gazebo's own pose of the model (the OdometryPublisher that
both worlds carry, bridged to ROS; in the plugin's run a ros_gz_bridge for that topic alone,
which is a measuring tool and not counted in the loop): over the hold, the hover error (RMS
of the distance to the target point: the takeoff spot at --altitude), its vertical and
horizontal parts, the drift (horizontal displacement from the hold's start to its end) and the
roll and pitch mean (trim) and standard deviation (noise); SITL's gyro and loop rates (medians
over its whole dataflash log, takeoff and landing included) and long loops; the CPU seconds of
the loop (every process the setup started but the launch itself and the pose-only bridge:
Gazebo, ros_gz_bridge, the bridge node and its link process, SITL, and 'other' for any it does
not recognise) per simulated and per wall second over the hold, and the real-time factor.
Prints each round, the medians and the issue's verdict (like for like only at the same pace).
"""

import argparse
from dataclasses import dataclass, field
import math
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple, TYPE_CHECKING

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'test'))

import iris_worlds  # noqa: E402
from proc_stats import children, cpu_seconds  # noqa: E402
import sitl_flight  # noqa: E402

if TYPE_CHECKING:
    from test_node_flight import SimulatorTruth

SETUPS = ('plugin', 'bridge', 'bridge-lockstep')
# The real-time factor of the lock-step flights on this 2-core machine (docs/lockstep.md: 0.35):
# the flight's time limit is stretched by it.
LOCK_STEP_PACE = 0.3
# 'other': a process of the setup that role_of does not recognise, counted in the loop.
LOOP_ROLES = ('gazebo', 'ros_gz_bridge', 'node', 'link', 'sitl', 'other')
# CPU seconds per simulated second of 'other' above which a round warns.
OTHER_WARNING = 0.02
# Real-time factors closer than this are the same pace for the verdict.
SAME_PACE = 0.05
LOCK_STEP_SPEEDUP = 100
# The goal: the bridge's hover error within this of the plugin's, at no more than
# CPU_RATIO times its CPU per simulated second.
HOVER_MARGIN = 0.1
CPU_RATIO = 1.5
# Wall seconds Gazebo may take to publish the model's first pose.
START_TIMEOUT = 60.0


@dataclass
class Round:
    """What one flight of one setup showed (None where it did not get that far)."""

    setup: str
    ok: bool = False
    why: str = ''
    hover_error: Optional[float] = None
    vertical: Optional[float] = None
    vertical_max: Optional[float] = None
    horizontal: Optional[float] = None
    drift: Optional[float] = None
    roll_mean: Optional[float] = None   # degrees, over the hold: the trim
    roll_std: Optional[float] = None    # the noise about it
    pitch_mean: Optional[float] = None
    pitch_std: Optional[float] = None
    gyro_rate: Optional[float] = None
    loop_rate: Optional[float] = None
    long_loops: int = 0
    sim_seconds: float = 0.0
    wall_seconds: float = 0.0
    cpu: Dict[str, float] = field(default_factory=dict)   # CPU seconds by role over the hold

    @property
    def loop_cpu(self) -> float:
        return sum(self.cpu.get(role, 0.0) for role in LOOP_ROLES)

    @property
    def cpu_per_sim(self) -> Optional[float]:
        return self.loop_cpu / self.sim_seconds if self.sim_seconds else None

    @property
    def cpu_per_wall(self) -> Optional[float]:
        return self.loop_cpu / self.wall_seconds if self.wall_seconds else None

    @property
    def real_time_factor(self) -> Optional[float]:
        return self.sim_seconds / self.wall_seconds if self.wall_seconds else None


def roll_pitch(x: float, y: float, z: float, w: float) -> Tuple[float, float]:
    """Roll and pitch (degrees, ZYX Euler angles) of a unit quaternion."""
    roll = math.atan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    pitch = math.asin(max(-1.0, min(1.0, 2.0 * (w * y - z * x))))
    return math.degrees(roll), math.degrees(pitch)


Pose = Tuple[float, float, float, float, float, float]   # stamp s, x, y, z, roll, pitch deg


def judge(result: Round, poses: Sequence[Pose], start: Tuple[float, float, float],
          altitude: float) -> None:
    """Fill result's hover figures from Gazebo's poses over the hold (start: at rest)."""
    x0, y0, z0 = start
    vertical = [abs(z - z0 - altitude) for _, _, _, z, _, _ in poses]
    horizontal = [math.hypot(x - x0, y - y0) for _, x, y, _, _, _ in poses]
    result.hover_error = math.sqrt(statistics.fmean(v * v + h * h
                                                    for v, h in zip(vertical, horizontal)))
    result.vertical, result.vertical_max = statistics.fmean(vertical), max(vertical)
    result.horizontal = statistics.fmean(horizontal)
    result.drift = math.hypot(poses[-1][1] - poses[0][1], poses[-1][2] - poses[0][2])
    for axis, index in (('roll', 4), ('pitch', 5)):
        angles = [p[index] for p in poses]
        setattr(result, f'{axis}_mean', statistics.fmean(angles))
        setattr(result, f'{axis}_std', statistics.pstdev(angles))
    result.sim_seconds = poses[-1][0] - poses[0][0]


def gazebo_poses(topic: str, domain: int) -> 'SimulatorTruth':
    """Gazebo's pose of the model from its bridged odometry: test_node_flight's truth, kept."""
    from ardupilot_json_bridge.messages.cdr import decode_odometry
    from test_node_flight import SimulatorTruth

    class GazeboPoses(SimulatorTruth):
        """The height (for the flight) and, while recording, every pose with its stamp."""

        def __init__(self) -> None:
            self.first: Optional[Tuple[float, float, float]] = None
            self.recording = False
            self.poses: List[Pose] = []
            super().__init__(topic, domain)

        def _on_odometry(self, data: bytes) -> None:
            super()._on_odometry(data)
            message = decode_odometry(data)
            p, q = message.pose.pose.position, message.pose.pose.orientation
            if self.first is None:
                self.first = (p.x, p.y, p.z)
            if self.recording:
                stamp = message.header.stamp
                self.poses.append((stamp.sec + stamp.nanosec * 1e-9, p.x, p.y, p.z,
                                   *roll_pitch(q.x, q.y, q.z, q.w)))

    return GazeboPoses()


def command_line(pid: int) -> List[str]:
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as stream:
            return stream.read().decode(errors='replace').split('\0')
    except OSError:
        return []


def role_of(command: Sequence[str]) -> str:
    """
    Which part of the loop a process of a launch is, from its program (not its arguments).

    `gz sim` (Ruby) rewrites its command line into one string: words, not arguments, count. A
    shell's `sh -c <command>` is the command's; what is not recognised is 'other'.
    """
    command = ' '.join(command).split()
    if len(command) > 2 and os.path.basename(command[0]) in ('sh', 'bash', 'dash') and \
            command[1] == '-c':
        command = command[2:]
    program = ' '.join(os.path.basename(part) for part in command[:3])
    if 'parameter_bridge' in program:
        return 'ros_gz_bridge'
    if 'link_process' in program:
        return 'link'
    if program.split(' ')[:2] in (['bridge'], ['python3', 'bridge'], ['python', 'bridge']) or \
            'ardupilot_json_bridge.cli' in program:
        return 'node'
    if (('gz' in program.split(' ')[:2] or 'ruby' in program) and 'sim' in command) or \
            program.split(' ')[0] == 'gz_server':
        return 'gazebo'
    return 'other'


def descendants(pid: int) -> List[int]:
    found = []
    for child in children(pid):
        found += [child, *descendants(child)]
    return found


Snapshot = Dict[int, Tuple[str, float]]


def snapshot(roots: Dict[str, int], classify: bool) -> Snapshot:
    """
    CPU seconds so far of each process under roots, with its role.

    The role is the root's name, but under classify a launch's processes (not the launch
    itself) take their own: role_of's, 'other' (in the loop) where it does not know them.
    """
    taken: Snapshot = {}
    for name, root in roots.items():
        for pid in (root, *descendants(root)):
            used = cpu_seconds(pid)
            if used is not None:
                own = classify and name == 'launch' and pid != root
                role = role_of(command_line(pid)) if own else name
                taken[pid] = (role, used)
    return taken


def cpu_by_role(before: Snapshot, after: Snapshot) -> Dict[str, float]:
    spent: Dict[str, float] = {}
    for pid, (role, used) in after.items():
        spent[role] = spent.get(role, 0.0) + used - before.get(pid, (role, 0.0))[1]
    return spent


def write(folder: str, name: str, text: str) -> str:
    path = os.path.join(folder, name)
    with open(path, 'w') as stream:
        stream.write(text)
    return path


def plugin_command(world: str, pace: float) -> List[str]:
    """
    Return `gz sim` for the plugin's world at a real-time factor (1: the world's own pace).

    As gazebo.launch.py's real_time_factor (launch_config.gazebo_arguments): `-z`, the world's
    steps a wall second at that factor.
    """
    from ardupilot_json_bridge.ros.launch_config import gazebo_arguments
    if pace == 1.0:
        return ['gz', 'sim', '-s', '-r', world]
    return ['gz', 'sim', *shlex.split(gazebo_arguments(world, True, str(pace)))]


def start_plugin(folder: str, model: str, instance: int,
                 pace: float, started: Dict[str, object]) -> None:
    """Gazebo with the ArduPilotPlugin, and a ros_gz_bridge for the odometry alone."""
    from ros2_tools import Running
    world = write(folder, 'plugin.sdf', iris_worlds.plugin_world(model, instance))
    topics = write(folder, 'odometry.yaml', iris_worlds.odometry_entry())
    started['gazebo'] = Running(plugin_command(world, pace))
    started['pose_bridge'] = Running(['ros2', 'run', 'ros_gz_bridge', 'parameter_bridge',
                                      '--ros-args', '-p', f'config_file:={topics}'])


def parse_setup(setup: str) -> Tuple[Optional[str], Optional[float]]:
    """
    Return a setup's output kind (None: the plugin) and real-time factor (None: lock-step).

    Setups: plugin[:RTF]; bridge[-actuators][-lockstep | :RTF], e.g. bridge:0.5 (the
    free-running bridge at half the wall clock), plugin:0.5 (the plugin's world at half the
    wall clock), bridge-actuators (one actuator_msgs/Actuators for the four rotors instead of
    four std_msgs/Float64).
    """
    name, _, factor = setup.partition(':')
    first, *options = name.split('-')
    if first not in ('plugin', 'bridge') or (first == 'plugin' and options) or \
            set(options) - {'actuators', 'lockstep'} or \
            len(set(options)) != len(options) or ('lockstep' in options and factor):
        raise ValueError(f'unknown setup {setup}: plugin[:RTF], or bridge[-actuators]'
                         '[-lockstep or :RTF] (bridge:0.5 at half the wall clock)')
    kind = (None if first == 'plugin' else
            iris_worlds.ACTUATORS if 'actuators' in options else iris_worlds.FLOAT64)
    if 'lockstep' in options:
        return kind, None
    try:
        value = float(factor or 1.0)
    except ValueError:
        raise ValueError(f'{setup}: {factor!r} is not a real-time factor') from None
    if not 0.0 < value <= 1.0:
        raise ValueError(f'{setup}: the real-time factor must be above 0 and at most 1')
    return kind, value


def bridge_files(model: str, standoffs: str, instance: int, kind: str) -> Dict[str, str]:
    """Return the bridge's world, ros_gz_bridge topics and preset (raises ModelError)."""
    controls = iris_worlds.plugin_controls(model)
    imu_topic, mounting = iris_worlds.imu(model, standoffs)
    return {'bridge.sdf': iris_worlds.bridge_world(model, kind),
            'ros_gz_bridge.yaml': iris_worlds.ros_gz_bridge_config(controls, kind, imu_topic),
            'preset.yaml': iris_worlds.bridge_preset(controls, instance, kind, mounting)}


def start_bridge(folder: str, model: str, standoffs: str, instance: int, kind: str,
                 pace: Optional[float], started: Dict[str, object]) -> None:
    """gazebo.launch.py with the JointController world, its topics and the bridge's preset."""
    from ros2_tools import launch
    world, topics, preset = (write(folder, name, text) for name, text in
                             bridge_files(model, standoffs, instance, kind).items())
    paced = ('sim_control:=gz_control_world' if pace is None
             else f'real_time_factor:={pace}')
    started['launch'] = launch('gazebo.launch.py', 'server_only:=true', f'world:={world}',
                               f'bridge_config:={topics}', f'params_file:={preset}',
                               f'instance:={instance}', paced)


def fly_round(setup: str, model: str, standoffs: str, instance: int, altitude: float,
              hold: float, domain: int) -> Round:
    """Fly one setup once and judge it (model, standoffs: the two model.sdf texts)."""
    result = Round(setup)
    kind, pace = parse_setup(setup)
    lock_step = pace is None
    started: Dict[str, object] = {}
    poses = None
    folder = tempfile.mkdtemp(prefix=f'side-{setup}-')
    try:
        if kind is None:
            start_plugin(folder, model, instance, pace, started)
        else:
            start_bridge(folder, model, standoffs, instance, kind, pace, started)
        poses = gazebo_poses(f'/{iris_worlds.NAMESPACE}/odom', domain)
        if lock_step:   # paused until SITL's first frame: wait for the bridge instead
            ready = started['launch'].wait_for_text('listening on UDP', START_TIMEOUT)
        else:
            deadline = time.monotonic() + START_TIMEOUT
            while poses.first is None and time.monotonic() < deadline:
                time.sleep(0.2)
            ready = poses.first is not None
        if not ready:
            result.why = f'no pose of the model from Gazebo in {START_TIMEOUT:.0f} s'
            return result
        speedup = LOCK_STEP_SPEEDUP if lock_step else 1
        with sitl_flight.Sitl(instance=instance, speedup=speedup) as sitl:
            roots = {name: process.process.pid for name, process in started.items()}
            roots['sitl'] = sitl.process.pid
            marks: List[Tuple[float, Snapshot]] = []

            def hover(starts: bool) -> None:
                poses.recording = starts
                marks.append((time.monotonic(), snapshot(roots, classify=True)))

            record = sitl_flight.fly(sitl, altitude, hold, lambda: poses.height,
                                     timeout=(hold + sitl_flight.FLIGHT_TIMEOUT)
                                     / (pace or LOCK_STEP_PACE), hover=hover)
            result.gyro_rate, result.loop_rate, result.long_loops = sitl.figures()
            if not (record.armed and record.reached) or len(marks) < 2 or not poses.poses:
                result.why = (f'armed {record.armed}, reached {record.reached}; SITL said: '
                              f'{" | ".join(record.texts[-5:])}')
                return result
        judge(result, poses.poses, poses.first, altitude)
        result.wall_seconds = marks[1][0] - marks[0][0]
        result.cpu = cpu_by_role(marks[0][1], marks[1][1])
        result.ok = True
        return result
    except (sitl_flight.SitlDied, iris_worlds.ModelError) as error:
        result.why = str(error).splitlines()[0]
        return result
    finally:
        if poses is not None:
            poses.close()
        for process in started.values():
            process.interrupt()
        shutil.rmtree(folder, ignore_errors=True)


def figure(value: Optional[float], digits: int = 3) -> str:
    return '-' if value is None else f'{value:.{digits}f}'


def describe(result: Round) -> str:
    if not result.ok:
        return f'did not fly: {result.why}'
    parts = ', '.join(f'{role} {result.cpu[role] / result.sim_seconds:.3f}'
                      for role in (*LOOP_ROLES, 'launch', 'pose_bridge') if role in result.cpu)
    other = result.cpu.get('other', 0.0) / result.sim_seconds
    warning = (f'; WARNING: processes of unknown role took {other:.3f} s per sim s (counted '
               'in the loop as other)' if other > OTHER_WARNING else '')
    return (f'hover error {figure(result.hover_error)} m (vertical mean '
            f'{figure(result.vertical)}, max {figure(result.vertical_max)}; horizontal '
            f'{figure(result.horizontal)}), drift {figure(result.drift)} m in '
            f'{result.sim_seconds:.1f} s, roll mean {figure(result.roll_mean, 2)} std '
            f'{figure(result.roll_std, 2)} deg, pitch mean {figure(result.pitch_mean, 2)} std '
            f'{figure(result.pitch_std, 2)} deg, SITL gyro {figure(result.gyro_rate, 0)} Hz, '
            f'loop {figure(result.loop_rate, 0)} Hz, long loops {result.long_loops}; CPU '
            f'{figure(result.cpu_per_sim)} s per sim s ({parts}), {figure(result.cpu_per_wall)} '
            f'per wall s, real-time factor {figure(result.real_time_factor)}{warning}')


COLUMNS: Sequence[Tuple[str, Callable[[Round], Optional[float]], int]] = (
    ('hover error m', lambda r: r.hover_error, 3),
    ('vertical m', lambda r: r.vertical, 3),
    ('horizontal m', lambda r: r.horizontal, 3),
    ('drift m', lambda r: r.drift, 3),
    ('roll mean deg', lambda r: r.roll_mean, 2),
    ('roll std deg', lambda r: r.roll_std, 2),
    ('pitch mean deg', lambda r: r.pitch_mean, 2),
    ('pitch std deg', lambda r: r.pitch_std, 2),
    ('gyro Hz', lambda r: r.gyro_rate, 0),
    ('loop Hz', lambda r: r.loop_rate, 0),
    ('CPU s / sim s', lambda r: r.cpu_per_sim, 3),
    ('CPU s / wall s', lambda r: r.cpu_per_wall, 3),
    ('real-time factor', lambda r: r.real_time_factor, 3),
)


def median(results: Sequence[Round], value: Callable[[Round], Optional[float]]
           ) -> Optional[float]:
    values = [value(r) for r in results if r.ok and value(r) is not None]
    return statistics.median(values) if values else None


def table(by_setup: Dict[str, List[Round]]) -> str:
    """Return the medians of each setup as a Markdown table."""
    lines = ['| setup | flown | ' + ' | '.join(name for name, _, _ in COLUMNS) + ' |',
             '| --- ' * (len(COLUMNS) + 2) + '|']
    for setup, results in by_setup.items():
        flown = f'{sum(r.ok for r in results)}/{len(results)}'
        cells = [figure(median(results, value), digits) for _, value, digits in COLUMNS]
        lines.append(f'| {setup} | {flown} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def cpu_table(by_setup: Dict[str, List[Round]]) -> str:
    """Median CPU seconds per simulated second of each process of each setup."""
    roles = [*LOOP_ROLES, 'launch', 'pose_bridge']
    lines = ['| setup | ' + ' | '.join(roles) + ' |', '| --- ' * (len(roles) + 1) + '|']
    for setup, results in by_setup.items():
        cells = [figure(median(results, lambda r, role=role: (
            r.cpu[role] / r.sim_seconds if role in r.cpu and r.sim_seconds else None)))
            for role in roles]
        lines.append(f'| {setup} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def verdict(by_setup: Dict[str, List[Round]]) -> List[str]:
    """
    Return the issue's goal for each bridge setup against the plugin's medians.

    Each is judged against the plugin flown at its pace (plugin:RTF) where the run has it,
    else against the first plugin setup, and the line says when the two paces differ. A bridge
    setup that did not fly at the pace of the plugin it is judged against misses the goal.
    """
    plugins = {setup: parse_setup(setup)[1] for setup in by_setup
               if parse_setup(setup)[0] is None}
    lines = []
    for setup in (s for s in by_setup if s not in plugins):
        pace = parse_setup(setup)[1]
        plugin = next((p for p, theirs in plugins.items() if theirs == pace),
                      next(iter(plugins), None))
        if plugin is None:
            lines.append(f'{setup}: no verdict (no plugin setup in this run)')
            continue
        results = by_setup[plugin]
        error, cpu, plugin_pace = (median(results, lambda r: r.hover_error),
                                   median(results, lambda r: r.cpu_per_sim),
                                   median(results, lambda r: r.real_time_factor))
        if None in (error, cpu):
            lines.append(f'{setup}: no verdict ({plugin} did not fly)')
            continue
        theirs = (median(by_setup[setup], lambda r: r.hover_error),
                  median(by_setup[setup], lambda r: r.cpu_per_sim),
                  median(by_setup[setup], lambda r: r.real_time_factor))
        if None in theirs[:2]:
            lines.append(f'{setup}: goal missed (it did not fly at the pace of {plugin})'
                         if pace == plugins[plugin] else
                         f'{setup}: no verdict (it did not fly)')
            continue
        near, cheap = theirs[0] - error <= HOVER_MARGIN, theirs[1] <= CPU_RATIO * cpu
        paces = ('' if abs(theirs[2] - plugin_pace) <= SAME_PACE else
                 f' (NOT like for like: real-time factor {theirs[2]:.2f} against '
                 f"{plugin}'s {plugin_pace:.2f})")
        lines.append(f'{setup} against {plugin}: hover error {theirs[0]:.3f} m against '
                     f'{error:.3f} m ({"within" if near else "NOT within"} {HOVER_MARGIN} m), '
                     f"CPU {theirs[1] / cpu:.2f} x the plugin's per simulated second "
                     f'({"at most" if cheap else "MORE than"} {CPU_RATIO} x): goal '
                     f'{"met" if near and cheap else "missed"}{paces}')
    return lines


def missing(setups: Sequence[str], instance: int = 0) -> Optional[str]:
    """Why the benchmark cannot run here, in one line, or None (builds every world)."""
    if sitl_flight.sitl_binary() is None:
        return f'needs real SITL: set {sitl_flight.SITL_DIR_VARIABLE}'
    if shutil.which('gz') is None or shutil.which('ros2') is None:
        return 'needs Gazebo, ros_gz and ROS 2: source /opt/gz/harmonic/activate.sh'
    from ros2_tools import ros2_missing
    reason = ros2_missing()
    if reason:
        return reason
    return unbuildable(setups, instance, os.environ.get('GZ_SIM_RESOURCE_PATH', ''))


def unbuildable(setups: Sequence[str], instance: int, resource_path: str) -> Optional[str]:
    """Why a setup is unknown or its world cannot be written from the models (one line)."""
    try:
        kinds = [parse_setup(setup)[0] for setup in setups]
    except ValueError as error:
        return str(error)
    reason = iris_worlds.loadable(resource_path)
    if reason:
        return reason
    model, standoffs = models(resource_path)
    try:
        for kind in kinds:
            if kind is None:
                iris_worlds.plugin_world(model, instance)
            else:
                bridge_files(model, standoffs, instance, kind)
    except iris_worlds.ModelError as error:
        return f'{iris_worlds.model_path(resource_path)}: {error}'
    return None


def models(resource_path: str) -> Tuple[str, str]:
    """Return the texts of iris_with_ardupilot's and iris_with_standoffs' model.sdf."""
    texts = []
    for name in (iris_worlds.PLUGIN_MODEL, iris_worlds.STANDOFFS_MODEL):
        with open(iris_worlds.model_path(resource_path, name)) as stream:
            texts.append(stream.read())
    return texts[0], texts[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--hold', type=float, default=60.0, help='hold, simulated seconds')
    parser.add_argument('--altitude', type=float, default=5.0)
    parser.add_argument('--setups', default=','.join(SETUPS))
    parser.add_argument('--instance', type=int, default=50, help='SITL instance')
    args = parser.parse_args()
    setups = [s for s in args.setups.split(',') if s]
    if args.rounds < 1 or not setups:
        print('--rounds must be at least 1 and --setups name one setup or more')
        return 1
    reason = missing(setups, args.instance)
    if reason:
        print(reason)
        return 1
    # Gazebo transport and DDS find every process of their partition and domain on the
    # machine: the caller's, else one of this run's own.
    os.environ.setdefault('GZ_PARTITION', f'side_by_side_{os.getpid()}')
    os.environ.setdefault('ROS_DOMAIN_ID', str(random.randint(1, 101)))
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    domain = int(os.environ['ROS_DOMAIN_ID'])
    model, standoffs = models(os.environ['GZ_SIM_RESOURCE_PATH'])
    print(f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}: {args.rounds} round(s) of '
          f'{", ".join(setups)}; takeoff to {args.altitude:g} m, {args.hold:g} s hold; SITL '
          f'instance {args.instance}, ROS domain {domain}, GZ_PARTITION '
          f'{os.environ["GZ_PARTITION"]}', flush=True)
    by_setup: Dict[str, List[Round]] = {setup: [] for setup in setups}
    for number in range(1, args.rounds + 1):
        for setup in setups:
            result = fly_round(setup, model, standoffs, args.instance, args.altitude,
                               args.hold, domain)
            by_setup[setup].append(result)
            print(f'round {number} {setup}: {describe(result)}', flush=True)
    print(f'\nMedians of {args.rounds} round(s):\n{table(by_setup)}\n\nCPU s per simulated '
          f"second by process (medians of each, apart: they need not add up to the loop's; "
          f'launch and pose_bridge are not in the loop, other is):\n'
          f'{cpu_table(by_setup)}\n')
    print('\n'.join(verdict(by_setup)))
    return 0 if all(r.ok for results in by_setup.values() for r in results) else 1


if __name__ == '__main__':
    sys.exit(main())
