"""`ardupilot-json-bridge`: serve SITL from MuJoCo, a bag or an FDMData simulator."""

import argparse
from dataclasses import asdict, replace
import json
import logging
import sys
import threading
import time
from typing import List, Optional

from ardupilot_json_bridge.checks.conventions import ConventionChecker
from ardupilot_json_bridge.checks.live import LIVE_WINDOW, LiveConventions
from ardupilot_json_bridge.checks.verdicts import format_table
from ardupilot_json_bridge.config import (
    BridgeConfig, check_fleet, check_number, config_from_parameters, ConfigError, Limits,
    load_parameters_file, NODE_NAME, RATE_LIMITS, shipped_preset)
from ardupilot_json_bridge.core.settings import GRID, MAX_PORT, SAMPLES
from ardupilot_json_bridge.core.stats import InputMeter, LinkStats
from ardupilot_json_bridge.core.wakeup import Wakeup
from ardupilot_json_bridge.link.fleet_server import FleetServer
from ardupilot_json_bridge.link.sitl_link import SitlLink
from ardupilot_json_bridge.link.udp_port import LinkError
from ardupilot_json_bridge.sources.bagfile import BagError
from ardupilot_json_bridge.sources.mujoco_vehicle import VehicleError
from ardupilot_json_bridge.sources.replay import RATE_LIMITS as REPLAY_RATE_LIMITS
from ardupilot_json_bridge.sources.wind import GUST_LIMITS

PACKAGE = 'ardupilot_json_bridge'
# The GIL switch interval (s) of the lock-step engine's process. A link thread woken by SITL's
# datagram waits for the GIL up to the interval while another thread (the live checks' judge,
# the recorder's writer) holds it: Python's 5 ms default would stall SITL for several frames.
LOCK_STEP_SWITCH_INTERVAL = 1e-4
# The engine's optional values (wind, airspeed) come with each frame, at its stamp: the state
# need not keep a second of them, and 2.2 s of frames held (1 s, twice over, at 1200 frames/s)
# slowed SITL measurably on the 2-core machine.
ENGINE_OPTIONAL_AGE = 0.05
LOG_FORMAT = '[%(levelname)s] [%(asctime)s] [%(name)s]: %(message)s'
ROS_ARGS = '--ros-args'
# The exit status of a check stopped by Ctrl-C or SIGTERM before the end of its bag (128 + 2).
INTERRUPTED = 130
# The range of each numeric option, by subcommand: checked as the parameters are (one check,
# config.check_number), so NaN, infinity and values that cannot work are refused in one line.
OPTION_LIMITS = {
    'replay': {'rate': REPLAY_RATE_LIMITS},
    'mujoco': {'gust': GUST_LIMITS},
    'fdmdata': {'data_port': Limits(1, MAX_PORT), 'controls_port': Limits(1, MAX_PORT),
                'rate': RATE_LIMITS,
                'timeout': Limits(0.0, 10.0, above=True), 'smoothing': Limits(0.0, 3600.0),
                'servo_min': Limits(0.0, 65535.0), 'servo_max': Limits(0.0, 65535.0)},
}
# The ROS 2 nodes (need rclpy): their summary and description. They take ROS's own arguments,
# after --ros-args, and none of their own.
ROS_COMMANDS = {
    'node': ('the bridge as a ROS 2 node (needs rclpy)',
             'Serve SITL from the IMU and odometry topics of a ROS 2 simulator, and publish '
             "SITL's outputs as the parameters' output groups say."),
    'mujoco-sim': ('the MuJoCo vehicle as a free-running ROS 2 simulator (needs rclpy)',
                   'Publish /clock, imu and odom of the MuJoCo quad X, paced to the wall '
                   'clock, and take rotor speeds on command/motor_speed.'),
}


def _sample_bag() -> str:
    from ardupilot_json_bridge.sources.sample_bag import SAMPLE_BAG
    return SAMPLE_BAG


def load_config(path: Optional[str], namespace: str, overrides: dict) -> BridgeConfig:
    """Return the bridge configuration from a ros__parameters file, with command-line overrides."""
    parameters = load_parameters_file(path, NODE_NAME, namespace) if path else {}
    parameters.update({k: v for k, v in overrides.items() if v is not None})
    return config_from_parameters(parameters)


def format_report(stats: LinkStats, meters: List[InputMeter], now: float) -> str:
    """Return the end-of-run summary: link counters, latency and each input's rate and age."""
    lines = ['link: ' + ', '.join(f'{k} {v}' for k, v in stats.summary().items())]
    for meter in meters:
        if meter.count or meter.rejected:
            age = meter.age(now)
            lines.append(f'input {meter.name}: {meter.count} messages, {meter.rejected} '
                         f'rejected, {meter.rate():.1f} Hz, last {age:.2f} s ago')
    return '\n'.join(lines)


def _add_link_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--instance', type=int, help='SITL instance -I N (port 9002 + 10 N)')
    parser.add_argument('--config', help="ros__parameters YAML (the node's presets work)")
    parser.add_argument('--bind', dest='bind_address', help='address to listen on')
    parser.add_argument('--port', type=int, help='UDP port (default 9002 + 10 x instance)')
    parser.add_argument('--log-level', default='info',
                        choices=['debug', 'info', 'warning', 'error'])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='ardupilot-json-bridge',
        description='Serve ArduPilot SITL (--model JSON:<ip>) without ROS.')
    commands = parser.add_subparsers(dest='command', required=True)
    for name, (summary, description) in ROS_COMMANDS.items():
        commands.add_parser(name, help=summary, description=description,
                            epilog='ROS arguments follow --ros-args: --params-file FILE, '
                                   '-p name:=value, -r __ns:=/vehicle, -r topic:=other.')
    replay = commands.add_parser(
        'replay', help="serve SITL from a rosbag2 of a simulator's topics",
        description='Replay a rosbag2 (sqlite3 or MCAP) of odometry and IMU to SITL. '
                    'Without BAG, a shipped sample (a vehicle resting on the ground) '
                    'plays in a loop.')
    replay.add_argument('bag', nargs='?', help='rosbag2 directory')
    replay.add_argument('--namespace', default='', help='namespace of the recorded topics')
    replay.add_argument('--rate', type=float, default=1.0,
                        help='playback speed; 0 plays as fast as SITL asks (default 1)')
    replay.add_argument('--loop', action='store_true', help='start over at the end')
    _add_link_arguments(replay)
    engine = commands.add_parser(
        'mujoco', help='fly a MuJoCo model in lock-step with SITL (no ROS)',
        description="Step a MuJoCo model once per SITL frame: PWM in through the preset's "
                    'output group, sensors out. Lock-step: SITL --speedup N runs it N times '
                    'faster than real time.')
    engine.add_argument('model_path', nargs='?', metavar='MODEL',
                        help='MJCF model file (default: the shipped quad X)')
    engine.add_argument('--model', help='a shipped vehicle (quad_x, rover, rover_skid, '
                                        "plane) or an MJCF file; a shipped vehicle's preset "
                                        'is the default --config')
    engine.add_argument('--wind', metavar='EAST,NORTH[,UP]',
                        help='steady wind in m/s (ENU) for a model with aerodynamics (the '
                             'plane); SITL hears it through the airspeed')
    engine.add_argument('--gust', type=float, default=0.0, metavar='M/S',
                        help='standard deviation of the gusts about the steady wind')
    engine.add_argument('--viewer', action='store_true',
                        help="open MuJoCo's passive viewer (needs a display)")
    engine.add_argument('--group', help='the one output group of the preset that drives '
                                        "the model's actuators (default: all its groups, in "
                                        'order)')
    engine.add_argument('--record', metavar='BAG',
                        help='write the flight (imu, odom, /clock, servo_pwm, the rotor '
                             'commands) to a new rosbag2 (MCAP) for Foxglove or PlotJuggler')
    engine.add_argument('--reply-first', action='store_true',
                        help='answer each SITL frame at once with the state stepped by the '
                             "frame before's PWM, then step this frame's PWM while SITL "
                             'computes its next frame: faster, but each PWM acts one frame '
                             '(1/SIM_RATE_HZ) later than in lock-step (one vehicle only)')
    engine.add_argument('--no-step-ahead', action='store_true',
                        help='step each frame only once its packet is in; by default the '
                             'next frame is stepped after each reply, as if its PWM repeats '
                             '(most do: SITL sends 3 frames per 400 Hz loop), and answered at '
                             'once if it does: the same replies, sooner (a fleet, the viewer '
                             'and --reply-first never step ahead)')
    engine.add_argument('--python-frames', action='store_true',
                        help='serve every frame in Python; by default the plain frames of '
                             'vehicles without a force model or viewer are served by the '
                             'compiled frame loop, with the same rules and replies, and none '
                             'is stepped ahead (it answers in microseconds)')
    engine.add_argument('--vehicles', type=int, default=1,
                        help='N copies of the model in one world, vehicle k served on SITL '
                             'instance --instance + k (default 1)')
    engine.add_argument('--namespace-prefix', default='vehicle',
                        help="a fleet's vehicle k records under <prefix>k (default vehicle, "
                             "as mujoco-sim's vehicles:=N and the fleet launch)")
    _add_link_arguments(engine)
    fdm = commands.add_parser(
        'fdmdata', help='serve SITL from an FDMData (Huginn) flight simulator',
        description="Poll an FDMData simulator's sensors (UDP 10300), serve them to SITL and "
                    "send SITL's aileron, elevator, rudder and throttle to its controls port "
                    '(UDP 10301). For ArduPlane.')
    fdm.add_argument('--host', required=True, help="the simulator's address")
    fdm.add_argument('--data-port', type=int, default=10300)
    fdm.add_argument('--controls-port', type=int, default=10301)
    fdm.add_argument('--rate', type=float, default=100.0,
                     help='sensor polls per second, the physics rate SITL sees (default 100)')
    fdm.add_argument('--timeout', type=float, default=0.05,
                     help='seconds to wait for each sensor reply (default 0.05)')
    fdm.add_argument('--pitot', action='store_true',
                     help='airspeed from pitot and static pressure instead of the INS')
    fdm.add_argument('--velocity', choices=['airdata', 'fixes'], default='airdata',
                     help='velocity from heading, airspeed and climb rate (default), or from '
                          'successive GPS fixes')
    fdm.add_argument('--smoothing', type=float, default=1.0,
                     help='time constant (s) blending float32 fixes with velocity; 0: raw')
    fdm.add_argument('--channels', default='1,2,4,3',
                     help='SERVO channels of aileron, elevator, rudder, throttle (1,2,4,3)')
    fdm.add_argument('--servo-min', type=float, default=1000.0)
    fdm.add_argument('--servo-max', type=float, default=2000.0)
    _add_link_arguments(fdm)
    check = commands.add_parser(
        'check', help="judge a bag's conventions (frames, units, gravity, time)",
        description="Judge the simulator's conventions from its own IMU and odometry in a "
                    'rosbag2: gravity, world frame, IMU mounting, twist frame, quaternions, '
                    'units and stamps, and from servo_pwm the layout SITL mixes for, each '
                    'with what was measured and the fix. Exits 1 when a check is wrong, 130 '
                    'when stopped (Ctrl-C, SIGTERM) before the end of the bag. '
                    'Without BAG, the shipped sample.')
    check.add_argument('bag', nargs='?', help='rosbag2 directory')
    check.add_argument('--namespace', default='', help='namespace of the recorded topics')
    check.add_argument('--config', help="ros__parameters YAML (the node's presets work)")
    check.add_argument('--json', action='store_true', help='print the checks as JSON')
    check.add_argument('--vehicle', choices=['copter', 'plane', 'rover'],
                       help="what the bag's servo_pwm drives, for the layout check: a copter's "
                            "motors, a plane's aileron (SERVO1) or a rover's steering (SERVO1); "
                            "default: a copter's layouts are tried")
    check.add_argument('--log-level', default='info',
                       choices=['debug', 'info', 'warning', 'error'])
    for subcommand in commands.choices.values():
        subcommand.set_defaults(subcommand_parser=subcommand)
    return parser


def parse_arguments(arguments: List[str]) -> argparse.Namespace:
    """Parse the command line; an argument a subcommand does not know is its usage error."""
    args, unknown = build_parser().parse_known_args(arguments)
    if unknown:
        args.subcommand_parser.error(f'unrecognized arguments: {" ".join(unknown)}')
    return args


def check_options(args: argparse.Namespace) -> None:
    """Refuse a numeric option that is not finite or out of its range (OPTION_LIMITS)."""
    for dest, limits in OPTION_LIMITS.get(args.command, {}).items():
        check_number('--' + dest.replace('_', '-'), getattr(args, dest), limits)


def run_check(args: argparse.Namespace, stop: threading.Event) -> int:
    """
    Print the convention checks of a bag; 1 if any is wrong.

    Ctrl-C or SIGTERM (stop) ends the reading: the checks judge what was read, and the exit
    status is INTERRUPTED whatever they say.
    """
    from ardupilot_json_bridge.checks.conventions import CHECK_WINDOW, observe_imu, \
        observe_odometry
    from ardupilot_json_bridge.checks.verdicts import WRONG
    from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
    from ardupilot_json_bridge.messages.inputs import stamp_seconds, time_seconds
    from ardupilot_json_bridge.messages.cdr_writer import CLOCK_TYPE
    from ardupilot_json_bridge.messages.routes import IMU_TYPE, ODOMETRY_TYPE
    from ardupilot_json_bridge.messages.servo_pwm import (
        LEGACY_SERVO_PWM_TYPE, pwm_sample, SERVO_PWM_TYPE)
    from ardupilot_json_bridge.sources.bagfile import CLOCK_TOPIC, read_messages
    from ardupilot_json_bridge.sources.replay import check_bag_topics, resolve_topic, WantedTopic
    warnings = RateLimitedLog(logging.getLogger('ardupilot_json_bridge'))
    config = load_config(args.config, args.namespace, {})
    inputs = config.inputs
    imu_topic = resolve_topic(args.namespace, inputs.imu_topic)
    odom_topic = resolve_topic(args.namespace, inputs.odom_topic)
    pwm_topic = resolve_topic(args.namespace, config.raw_pwm_topic or 'servo_pwm')
    checker = ConventionChecker(inputs.imu_mounting_rpy, inputs.odom_twist_frame, CHECK_WINDOW,
                                args.vehicle)
    clock, clock_logged = None, 0.0
    bag = args.bag or _sample_bag()
    available = check_bag_topics(bag, [
        WantedTopic(imu_topic, IMU_TYPE, 'imu', mandatory=True),
        WantedTopic(odom_topic, ODOMETRY_TYPE, 'odometry', mandatory=True),
        WantedTopic(CLOCK_TOPIC, CLOCK_TYPE, 'clock'),
        WantedTopic(pwm_topic, SERVO_PWM_TYPE, 'servo_pwm', older=(LEGACY_SERVO_PWM_TYPE,))])
    topics = [imu_topic, odom_topic] + [t for t in (CLOCK_TOPIC, pwm_topic) if t in available]
    read = 0
    for message in read_messages(bag, topics):
        if stop.is_set():
            logging.getLogger('ardupilot_json_bridge').warning(
                f'check: stopped after {read} messages of {bag}; the checks judge those only')
            break
        read += 1
        log_time = message.log_time_ns * 1e-9
        if message.topic == CLOCK_TOPIC:
            # Each IMU stamp is paired with the clock when it was logged.
            clock, clock_logged = time_seconds(message.message.clock), log_time
        elif message.topic == pwm_topic:
            # Stamped with its frame's physics time; an older recording's, with no header, at
            # the clock it was logged at, carried on by the log time since the last /clock.
            stamp, pwm, problem = pwm_sample(
                message.message, log_time if clock is None else clock + log_time - clock_logged)
            if problem:
                warnings.warning('pwm', problem)
            else:
                checker.add_pwm(stamp, pwm)
        elif message.topic == imu_topic:
            stamp = stamp_seconds(message.message.header)
            observe_imu(checker, message.message, stamp)
            if clock is not None:
                checker.add_clock(stamp, clock)
        else:
            observe_odometry(checker, message.message, stamp_seconds(message.message.header))
    checks = checker.checks()
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        print(format_table(checks))
    if stop.is_set():
        return INTERRUPTED
    return 1 if any(c.verdict == WRONG for c in checks) else 0


def run_replay(args: argparse.Namespace, stop: threading.Event) -> int:
    from ardupilot_json_bridge.core.state import SensorState
    from ardupilot_json_bridge.messages.routes import input_routes
    from ardupilot_json_bridge.sources.replay import BagReplay, ReplaySettings
    log = logging.getLogger('ardupilot_json_bridge')
    bag = args.bag or _sample_bag()
    config = load_config(args.config, args.namespace, {
        'instance': args.instance, 'bind_address': args.bind_address, 'port': args.port})
    state = SensorState(replace(config.state, pacing=SAMPLES if args.rate == 0 else GRID))
    conventions = live_checks(ConventionChecker(
        config.inputs.imu_mounting_rpy, config.inputs.odom_twist_frame, LIVE_WINDOW))
    replay = BagReplay(ReplaySettings(bag, args.namespace, args.rate,
                                      args.loop or args.bag is None),
                       input_routes(config, state), state, checker=conventions.checker)
    link = SitlLink(config.link, state)
    log.info(f'replaying {bag} ({replay.count} messages, {replay.span:.2f} s'
             f'{", looping" if replay.settings.loop else ""}) at rate '
             f'{args.rate:g}{" (as fast as SITL asks)" if args.rate == 0 else ""}')
    threading.Thread(target=lambda: (replay.finished.wait(), stop.set()), daemon=True).start()
    code = serve(link, replay, stop, conventions)
    return 1 if replay.error else code


def live_checks(checker: ConventionChecker) -> LiveConventions:
    """Return the live convention checks of a source, logging to the package's logger."""
    return LiveConventions(checker, logging.getLogger('ardupilot_json_bridge'))


def serve(link: SitlLink, source, stop: threading.Event,
          conventions: Optional[LiveConventions] = None) -> int:
    """Run link and source until stop is set, then stop both and print the report."""
    link.start()
    source.start()
    if conventions is not None:
        conventions.start()
    stop.wait()
    source.stop()
    link.stop()
    print(format_report(link.stats, list(link.state.meters.values()), time.monotonic()))
    if conventions is not None:
        conventions.stop()
        print(f'conventions, over the last {conventions.checker.window:g} s:\n'
              + format_table(conventions.judge()))
    return 0


def default_preset(name: str = 'quad_x.yaml') -> Optional[str]:
    """Return a shipped preset: beside the package in a checkout, under share/ when installed."""
    return shipped_preset(name)


def run_mujoco(args: argparse.Namespace, stop: threading.Event) -> int:
    from ardupilot_json_bridge.core.state import SensorState
    from ardupilot_json_bridge.sources.flight_recorder import FlightRecorder
    from ardupilot_json_bridge.sources.mujoco_fleet import FleetWorld
    from ardupilot_json_bridge.sources.compiled_frames import compile_frames
    from ardupilot_json_bridge.sources.mujoco_source import MujocoLockStep, outputs_description
    from ardupilot_json_bridge.sources.mujoco_vehicle import (
        DEFAULT_VEHICLE, engine_wind, load_world, MujocoVehicle, shipped_model)
    from ardupilot_json_bridge.sources.replay import resolve_topic
    if args.model and args.model_path:
        raise ConfigError(f'name the model once: --model {args.model} or {args.model_path}')
    path, shipped = shipped_model(args.model or args.model_path or DEFAULT_VEHICLE)
    preset = args.config or default_preset(shipped.preset if shipped else 'mujoco_quad_x.yaml')
    if preset is None:
        raise ConfigError('--config: the shipped preset was not found; name a ros__parameters '
                          "file with output groups for the model's actuators")
    config = load_config(preset, '', {
        'instance': args.instance, 'bind_address': args.bind_address, 'port': args.port})
    groups = {group.name: group for group in config.outputs}
    if args.group is not None and args.group not in groups:
        raise ConfigError(f'--group: {preset} has no output group {args.group!r} (it has '
                          f'{", ".join(groups) or "none"})')
    driving = [groups[args.group]] if args.group else list(config.outputs)
    count = args.vehicles
    check_fleet(config.link.instance, count)
    if count > 1 and args.reply_first:
        raise ConfigError('--reply-first serves one vehicle: a fleet steps its world when '
                          'every SITL has sent its frame')
    if count > 1 and args.port:
        raise ConfigError('--port serves one SITL: a fleet takes its ports from --instance '
                          '(vehicle k on SITL instance first + k)')
    world = load_world(path, count)
    vehicles = [MujocoVehicle(path, world, index) for index in range(count)]
    for vehicle in vehicles:
        vehicle.reset()
        if args.wind or args.gust:
            vehicle.wind = engine_wind(vehicle, args.wind, args.gust)
    fleet = FleetWorld(vehicles, config.link.hold_timeout, config.link.instance) \
        if count > 1 else None
    namespaces = [f'{args.namespace_prefix}{index}' if count > 1 else ''
                  for index in range(count)]
    # One group's commands are recorded on its topic; several groups' all together, in order.
    command_topic = driving[0].topic if len(driving) == 1 else 'commands'
    recorder = (FlightRecorder(args.record, resolve_topic('', command_topic),
                               namespaces=namespaces) if args.record else None)
    root = logging.getLogger('ardupilot_json_bridge')
    links, sources, checks = [], [], []
    try:
        for index, vehicle in enumerate(vehicles):
            settings = replace(config.link, instance=config.link.instance + index)
            state = SensorState(replace(config.state, pacing=SAMPLES,
                                        max_optional_age=ENGINE_OPTIONAL_AGE))
            # The vehicle's readings are REP-103 as they are: the checks' defaults.
            logger = root.getChild(namespaces[index]) if count > 1 else root
            conventions = LiveConventions(ConventionChecker(window=LIVE_WINDOW), logger)
            source = MujocoLockStep(vehicle, state, driving, viewer=args.viewer and not index,
                                    checker=conventions.checker, recorder=recorder,
                                    world=fleet, reply_first=args.reply_first)
            sources.append(source)
            link = SitlLink(settings, state, on_frame=source.on_frame,
                            on_restart=source.on_restart, after_reply=source.after_reply,
                            step_ahead=None if args.no_step_ahead else source.step_ahead)
            links.append(link)
            checks.append(conventions)
            root.info(f'MuJoCo {vehicle.path}: {outputs_description(vehicle, driving)}, in '
                      f'lock-step{" (reply-first)" if args.reply_first else ""} with SITL '
                      f'instance {settings.instance}'
                      + (f' (vehicle {index}, namespace {namespaces[index]})'
                         if count > 1 else ''))
        server = (FleetServer(links, fleet, [source.held_instant for source in sources])
                  if fleet is not None else None)
        if not args.python_frames:
            blocker = compile_frames(links, sources, server)
            root.info('plain frames served by the compiled frame loop (--python-frames: in '
                      'Python)' if blocker is None else f'frames served in Python: {blocker}')
        return serve_all(links, stop, checks, server)
    finally:
        for link in links:
            link.stop()
        for source in sources:
            source.close()
        if recorder is not None and fleet is not None:
            recorder.close()


def serve_all(links: List[SitlLink], stop: threading.Event,
              checks: List[LiveConventions], fleet: Optional[FleetServer] = None) -> int:
    """
    Serve lock-step links (a vehicle alone in its link's thread, a fleet in its server's).

    Meanwhile the GIL switch interval is short (restored after): Python's 5 ms would let
    the checks' judge hold SITL's reply back for frames.
    """
    interval = sys.getswitchinterval()
    sys.setswitchinterval(LOCK_STEP_SWITCH_INTERVAL)
    try:
        if fleet is None:
            return serve(links[0], NoSource(), stop, checks[0])
        return _serve_fleet(links, stop, checks, fleet)
    finally:
        sys.setswitchinterval(interval)


def _serve_fleet(links: List[SitlLink], stop: threading.Event,
                 checks: List[LiveConventions], fleet: FleetServer) -> int:
    """Serve a fleet's links until stop is set, then report each."""
    fleet.start()
    for conventions in checks:
        conventions.start()
    stop.wait()
    fleet.stop()
    for link, conventions in zip(links, checks):
        link.stop()
        print(f'SITL instance {link.settings.instance}:')
        print(format_report(link.stats, list(link.state.meters.values()), time.monotonic()))
        conventions.stop()
        print(f'conventions, over the last {conventions.checker.window:g} s:\n'
              + format_table(conventions.judge()))
    return 0


class NoSource:
    """A source with no thread of its own (lock-step sources run in the link's)."""

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> None:
        """Nothing to stop."""


def run_fdmdata(args: argparse.Namespace, stop: threading.Event) -> int:
    from ardupilot_json_bridge.core.state import SensorState
    from ardupilot_json_bridge.sources.fdmdata_source import (
        FdmDataSettings, FdmDataSource, parse_channels, servo_channels_description)
    try:
        channels = parse_channels(args.channels)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if args.servo_max <= args.servo_min:
        raise ConfigError(f'--servo-max: {args.servo_max:g} is not above --servo-min '
                          f'{args.servo_min:g}')
    config = load_config(args.config, '', {
        'instance': args.instance, 'bind_address': args.bind_address, 'port': args.port})
    settings = FdmDataSettings(
        host=args.host, data_port=args.data_port, controls_port=args.controls_port,
        rate=args.rate, timeout=args.timeout, pitot=args.pitot, velocity=args.velocity,
        smoothing=args.smoothing, channels=channels, servo_min=args.servo_min,
        servo_max=args.servo_max)
    state = SensorState(config.state)
    source = FdmDataSource(settings, state)
    link = SitlLink(config.link, state, on_frame=source.on_frame)
    logging.getLogger('ardupilot_json_bridge').info(
        f'polling FDMData at {args.host}:{args.data_port} at {args.rate:g} Hz; controls to '
        f'{args.host}:{args.controls_port} ({servo_channels_description(channels)})')
    return serve(link, source, stop)


def run_ros_node(command: str, ros_arguments: List[str]) -> int:
    """Run a ROS 2 node of ROS_COMMANDS with ROS's arguments (from --ros-args on)."""
    if command == 'node':
        from ardupilot_json_bridge.ros.node import main as node_main
        return node_main(['ardupilot-json-bridge', *ros_arguments])
    from ardupilot_json_bridge.ros.mujoco_sim import main as sim_main
    return sim_main(['mujoco_sim', *ros_arguments])


def main(argv: Optional[List[str]] = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    ros_arguments: List[str] = []
    if arguments[:1] and arguments[0] in ROS_COMMANDS and ROS_ARGS in arguments:
        # ROS's arguments go to rclpy; anything before them is the parser's (--help, typos).
        split = arguments.index(ROS_ARGS)
        arguments, ros_arguments = arguments[:split], arguments[split:]
    args = parse_arguments(arguments)
    if args.command in ROS_COMMANDS:
        return run_ros_node(args.command, ros_arguments)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    stop = threading.Event()
    signals = Wakeup()
    signals.watch(stop)
    try:
        check_options(args)
        if args.command == 'fdmdata':
            return run_fdmdata(args, stop)
        if args.command == 'mujoco':
            return run_mujoco(args, stop)
        if args.command == 'check':
            return run_check(args, stop)
        return run_replay(args, stop)
    except (ConfigError, BagError, VehicleError) as error:
        logging.getLogger('ardupilot_json_bridge').error(str(error))
        return 2
    except LinkError as error:
        logging.getLogger('ardupilot_json_bridge').error(str(error))
        return 1
    finally:
        signals.close(restore_handlers=True)


if __name__ == '__main__':
    sys.exit(main())
