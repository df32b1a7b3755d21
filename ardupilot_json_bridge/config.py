"""
One configuration for the node, the replay runner and the tests, validated once.

Settings are ROS parameters: flat names with dots, as a ros__parameters YAML file or the
node's declared parameters give them. PARAMETERS describes every fixed one (the node declares
them from it); output groups add outputs.<group>.<setting> for each name in output_groups.
"""

from dataclasses import dataclass
import difflib
import math
import os
import re
import sys
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

import yaml

from ardupilot_json_bridge.core.protocol import MAX_RANGEFINDERS
from ardupilot_json_bridge.core.pwm import ActuatorField, ChannelScaling, OutputGroup, OutputKind
from ardupilot_json_bridge.core.settings import (
    LinkSettings, MAX_FLEET, MAX_INSTANCE, MAX_PORT, MAX_RATE, StateSettings)

NODE_NAME = 'json_sitl_bridge'
MAX_SERVO_CHANNELS = 32
RANGE, LASER_SCAN = 'range', 'laser_scan'
GROUP_NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
# sim_control: the simulator runs free, or the bridge steps it (lock-step through ROS).
SIM_CONTROL_NONE = 'none'
SIMULATION_INTERFACES = 'simulation_interfaces'
GZ_CONTROL_WORLD = 'gz_control_world'
SIM_CONTROL_MODES = (SIM_CONTROL_NONE, SIMULATION_INTERFACES, GZ_CONTROL_WORLD)
IGNORED_PREFIXES = ('use_sim_time', 'qos_overrides.', 'start_type_description_service')


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """'; did you mean <closest>?' for a misspelled name, or nothing when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f'; did you mean {close[0]}?' if close else ''


def one_line(error: BaseException) -> str:
    """Return an error's text on one line (a YAML or a storage library's error spans several)."""
    return ' '.join(str(error).split())


def shown_name(name: Any) -> str:
    """Return a name as an error line shows it: as it is, or quoted if it would break the line."""
    text = str(name)
    return text if text.isprintable() else repr(text)


class ConfigError(ValueError):
    """A setting that cannot work; the message starts with the setting's name."""


@dataclass(frozen=True)
class ParameterSpec:
    """A fixed ROS parameter: default, what it does, and the limits the node declares."""

    name: str
    default: Any
    description: str
    read_only: bool = False
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    choices: Tuple[str, ...] = ()


def _rangefinder_specs() -> Tuple[ParameterSpec, ...]:
    specs = []
    for n in range(1, MAX_RANGEFINDERS + 1):
        specs.append(ParameterSpec(
            f'rangefinder_{n}_topic', '', f'Topic of rangefinder {n} (rng_{n}, '
            f'RNGFND{n}_TYPE=100); empty for none', read_only=True))
        specs.append(ParameterSpec(
            f'rangefinder_{n}_type', RANGE, f'Message type of rangefinder {n}: range '
            '(sensor_msgs/Range) or laser_scan (sensor_msgs/LaserScan, minimum valid ray)',
            read_only=True, choices=(RANGE, LASER_SCAN)))
    return tuple(specs)


PARAMETERS: Tuple[ParameterSpec, ...] = (
    ParameterSpec('instance', 0, f'SITL instance (-I N), 0 to {MAX_INSTANCE}; the link listens '
                  'on 9002 + 10 N', read_only=True, minimum=0, maximum=MAX_INSTANCE),
    ParameterSpec('bind_address', '127.0.0.1', 'Address to listen on; 0.0.0.0 when SITL runs '
                  'in a VM, a container or WSL', read_only=True),
    ParameterSpec('port', 0, 'UDP port to listen on; 0 for 9002 + 10 x instance',
                  read_only=True, minimum=0, maximum=MAX_PORT),
    ParameterSpec('fresh_timeout', 0.5, 'Wall seconds a SITL frame waits for physics newer '
                  'than the last reply before it goes unanswered', minimum=0.001, maximum=10.0),
    ParameterSpec('peer_timeout', 2.0, 'Wall seconds of silence after which another SITL '
                  'address may take over the link (a SITL starting again at frame 0 does at '
                  'once)', minimum=0.1, maximum=60.0),
    ParameterSpec('hold_timeout', 0.5, 'Wall seconds the world of a lock-step fleet '
                  '(mujoco --vehicles N) waits for a silent SITL before stepping without it; '
                  "below SITL's 1.1 s resend interval, so a held frame is answered before SITL "
                  'sends it again', read_only=True, minimum=0.01, maximum=1.0),
    ParameterSpec('no_time_sync', False, 'Send no_time_sync=1: SITL stops pacing to wall '
                  'time and (4.6.3+) switches AHRS to ground truth; off unless you know why',
                  read_only=True),
    ParameterSpec('no_lockstep', False, 'Send no_lockstep=1: SITL stops waiting for each '
                  'reply and runs on its own loop rate when none comes; for engines that '
                  'cannot answer every frame', read_only=True),
    ParameterSpec('odometry_only', False, 'Derive gyro and specific force from odometry, for '
                  'engines without an IMU', read_only=True),
    ParameterSpec('max_odometry_lag', 0.25, 'Largest physics-time gap between the IMU sample '
                  'and the odometry carried to it, seconds', minimum=0.0, maximum=10.0),
    ParameterSpec('max_backlog', 0.05, 'Physics seconds SITL may fall behind before replies '
                  'skip ahead to the newest samples (each reply otherwise advances one frame)',
                  minimum=0.0, maximum=10.0),
    ParameterSpec('horizon', 0.0, 'Physics seconds an instant SITL asks for may lie past the '
                  'newest IMU sample and still be answered at once, by extrapolation; 0 '
                  'waits for the simulation to reach it', minimum=0.0, maximum=1.0),
    ParameterSpec('max_optional_age', 1.0, 'Optional inputs older than this (physics seconds) '
                  'are left out of replies', minimum=0.0, maximum=60.0),
    ParameterSpec('odom_topic', 'odom', 'nav_msgs/Odometry of the vehicle (ENU world, body '
                  'twist)', read_only=True),
    ParameterSpec('imu_topic', 'imu', 'sensor_msgs/Imu of the vehicle', read_only=True),
    ParameterSpec('imu_mounting_rpy', [0.0, 0.0, 0.0], 'Orientation of the IMU frame in the '
                  'FLU body, degrees roll, pitch, yaw: [0, 0, 0] for a REP-103 IMU, '
                  "[180, 0, 0] for ardupilot_gazebo's FRD IMU", read_only=True),
    ParameterSpec('odom_twist_frame', 'child', 'Frame of the odometry twist: child (body, as '
                  'nav_msgs/Odometry defines) or world (ENU)', read_only=True,
                  choices=('child', 'world')),
) + _rangefinder_specs() + (
    ParameterSpec('wind_topic', '', 'geometry_msgs/Vector3Stamped wind velocity in the ENU '
                  'world (velocity_wind, windvane); empty for none', read_only=True),
    ParameterSpec('airspeed_topic', '', 'std_msgs/Float64 airspeed, m/s; empty for none',
                  read_only=True),
    ParameterSpec('battery_topic', '', 'sensor_msgs/BatteryState; empty for none',
                  read_only=True),
    ParameterSpec('rc_topic', '', 'sensor_msgs/Joy to RC channels 1-12 (axes, then buttons); '
                  'empty for none', read_only=True),
    ParameterSpec('raw_pwm_topic', 'servo_pwm', 'sensor_msgs/JointState of every new '
                  "frame's PWM (servo1..N, microseconds in position), stamped with the physics "
                  'time of the state SITL computed it from, for recording (published in '
                  'batches, each sent once its first frame is 50 ms old); empty for none',
                  read_only=True),
    ParameterSpec('sim_control', SIM_CONTROL_NONE, 'How the bridge drives the simulator: none '
                  '(it runs free, the bridge follows), simulation_interfaces (lock-step: the '
                  'bridge steps it to each SITL frame with StepSimulation) or gz_control_world '
                  "(lock-step through Gazebo's ControlWorld service, bridged by ros_gz_bridge)",
                  read_only=True, choices=SIM_CONTROL_MODES),
    ParameterSpec('sim_control_service', '', "Where the simulator's control services are: for "
                  'simulation_interfaces their namespace (/gzserver for Gazebo, mujoco_sim for '
                  "mujoco-sim; empty for the node's own), for gz_control_world the "
                  'ControlWorld service (/world/<world>/control)', read_only=True),
)

PARAMETER_DEFAULTS: Dict[str, Any] = {spec.name: spec.default for spec in PARAMETERS}
SPECS_BY_NAME: Dict[str, ParameterSpec] = {spec.name: spec for spec in PARAMETERS}
OUTPUT_SETTINGS = ('type', 'topic', 'topics', 'channels', 'field', 'servo_min', 'servo_max',
                   'multiplier', 'offset', 'initial')


@dataclass(frozen=True)
class InputSettings:
    """Which topics the node subscribes to, and how their messages are read."""

    odom_topic: str = 'odom'
    imu_topic: str = 'imu'
    imu_mounting_rpy: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    odom_twist_frame: str = 'child'
    rangefinders: Tuple[Tuple[str, str], ...] = ()
    wind_topic: str = ''
    airspeed_topic: str = ''
    battery_topic: str = ''
    rc_topic: str = ''


@dataclass(frozen=True)
class BridgeConfig:
    """Everything a bridge needs: link, state, inputs and output groups."""

    link: LinkSettings = LinkSettings()
    state: StateSettings = StateSettings()
    inputs: InputSettings = InputSettings()
    outputs: Tuple[OutputGroup, ...] = ()
    raw_pwm_topic: str = 'servo_pwm'
    sim_control: str = SIM_CONTROL_NONE
    sim_control_service: str = ''


@dataclass(frozen=True)
class Limits:
    """The range a number must lie in; above: the minimum itself is refused (a rate > 0)."""

    minimum: Optional[float] = None
    maximum: Optional[float] = None
    above: bool = False


def check_number(name: str, value: Any, limits: Limits = Limits()) -> float:
    """
    Return value as a float if it is a finite number within limits, else raise ConfigError.

    The one check of every numeric option and parameter (command line, YAML, ROS): NaN and
    infinity are no numbers a setting can take.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f'{name}: expected a number, got {value!r}')
    try:
        number = float(value)
    except OverflowError:
        raise ConfigError(f'{name}: {value} is too large a number') from None
    if not math.isfinite(number):
        raise ConfigError(f'{name}: expected a finite number, got {number!r}')
    low, high = limits.minimum, limits.maximum
    if low is not None and limits.above and number <= low:
        raise ConfigError(f'{name}: {number:g} is not above {low:g}')
    if low is not None and number < low:
        raise ConfigError(f'{name}: {number:g} is below the minimum {low:g}')
    if high is not None and number > high:
        raise ConfigError(f'{name}: {number:g} is above the maximum {high:g}')
    return number


# A rate in Hz of a free-running source (its IMU, its polls): above 0, up to MAX_RATE.
RATE_LIMITS = Limits(0.0, MAX_RATE, above=True)
# The vehicles of one fleet.
FLEET_LIMITS = Limits(1, MAX_FLEET)


def check_fleet(first_instance: int, count: int) -> None:
    """Refuse a fleet (vehicle k on SITL instance first + k) whose last vehicle has no port."""
    check_number('vehicles', count, FLEET_LIMITS)
    last = first_instance + count - 1
    if last > MAX_INSTANCE:
        raise ConfigError(f'vehicles: {count} vehicles from instance {first_instance} reach '
                          f'instance {last}, past the last one with a UDP port '
                          f'({MAX_INSTANCE}); start at instance {MAX_INSTANCE - count + 1} '
                          'or lower')


def _number(name: str, value: Any, spec: Optional[ParameterSpec] = None) -> float:
    return check_number(name, value, Limits(spec.minimum, spec.maximum) if spec else Limits())


def _integer(name: str, value: Any, spec: Optional[ParameterSpec] = None) -> int:
    number = _number(name, value, spec)
    if number != int(number):
        raise ConfigError(f'{name}: expected a whole number, got {value!r}')
    return int(number)


def _text(name: str, value: Any, spec: Optional[ParameterSpec] = None) -> str:
    if not isinstance(value, str):
        raise ConfigError(f'{name}: expected a string, got {value!r}')
    if spec is not None and spec.choices and value not in spec.choices:
        raise ConfigError(f'{name}: {value!r} is not one of {", ".join(spec.choices)}')
    return value


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f'{name}: expected true or false, got {value!r}')
    return value


def _topic(name: str, value: Any) -> str:
    """
    Return a topic name as given.

    Relative names take the node's namespace; absolute ones (a ros_gz world's
    /model/quad/odometry) stay as they are; remapping applies to both.
    """
    return _text(name, value)


def _list(name: str, value: Any) -> Sequence[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f'{name}: expected a list, got {value!r}')
    return value


def _per_channel(name: str, value: Any, count: int, default: float) -> Tuple[float, ...]:
    if value is None:
        return (default,) * count
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (_number(name, value),) * count
    values = _list(name, value)
    if len(values) != count:
        raise ConfigError(f'{name}: {len(values)} values for {count} channels; give one '
                          'value for all or one per channel')
    return tuple(_number(f'{name}[{i}]', v) for i, v in enumerate(values))


def output_group(name: str, settings: Mapping[str, Any]) -> OutputGroup:
    """One output group from its outputs.<name>.* settings (keys without the prefix)."""
    prefix = f'outputs.{name}.'
    unknown = sorted(set(settings) - set(OUTPUT_SETTINGS))
    if unknown:
        raise ConfigError(f'{prefix}{unknown[0]}: unknown setting'
                          f'{did_you_mean(unknown[0], OUTPUT_SETTINGS)}; known: '
                          f'{", ".join(OUTPUT_SETTINGS)}')
    kinds = [k.value for k in OutputKind]
    kind_name = _text(prefix + 'type', settings.get('type', ''))
    if kind_name not in kinds:
        raise ConfigError(f'{prefix}type: {kind_name!r} is not one of {", ".join(kinds)}')
    kind = OutputKind(kind_name)
    channels = tuple(_integer(f'{prefix}channels[{i}]', c)
                     for i, c in enumerate(_list(prefix + 'channels',
                                                 settings.get('channels', []))))
    if not channels:
        raise ConfigError(f'{prefix}channels: list the SERVO channels (1-based) of the group')
    for channel in channels:
        if not 1 <= channel <= MAX_SERVO_CHANNELS:
            raise ConfigError(f'{prefix}channels: SERVO{channel} does not exist (1 to '
                              f'{MAX_SERVO_CHANNELS}; above 16 needs SERVO_32_ENABLE=1)')
    mins = _per_channel(prefix + 'servo_min', settings.get('servo_min'), len(channels), 1000.0)
    maxs = _per_channel(prefix + 'servo_max', settings.get('servo_max'), len(channels), 2000.0)
    for index, (low, high) in enumerate(zip(mins, maxs)):
        if high <= low:
            raise ConfigError(f'{prefix}servo_max: {high:g} is not above servo_min {low:g} '
                              f'(channel {channels[index]})')
    multipliers = _per_channel(prefix + 'multiplier', settings.get('multiplier'),
                               len(channels), 1.0)
    offsets = _per_channel(prefix + 'offset', settings.get('offset'), len(channels), 0.0)
    scalings = tuple(ChannelScaling(*values) for values in zip(mins, maxs, multipliers, offsets))
    fields = [f.value for f in ActuatorField]
    field_name = _text(prefix + 'field', settings.get('field', ActuatorField.VELOCITY.value))
    if field_name not in fields:
        raise ConfigError(f'{prefix}field: {field_name!r} is not one of {", ".join(fields)}')
    topics: Tuple[str, ...] = ()
    topic = ''
    if kind is OutputKind.FLOAT64:
        topics = tuple(_topic(f'{prefix}topics[{i}]', t)
                       for i, t in enumerate(_list(prefix + 'topics',
                                                   settings.get('topics', []))))
        if len(topics) != len(channels):
            raise ConfigError(f'{prefix}topics: {len(topics)} topics for {len(channels)} '
                              'channels; a float64 group publishes one topic per channel')
    else:
        topic = _topic(prefix + 'topic', settings.get('topic', name))
    return OutputGroup(
        name=name, kind=kind, topic=topic, channels=channels, scalings=scalings,
        field=ActuatorField(field_name), topics=topics,
        initial=_number(prefix + 'initial', settings.get('initial', 0.0)))


def _rangefinders(values: Mapping[str, Any]) -> Tuple[Tuple[str, str], ...]:
    configured = []
    for n in range(1, MAX_RANGEFINDERS + 1):
        topic = _topic(f'rangefinder_{n}_topic', values[f'rangefinder_{n}_topic'])
        kind = _text(f'rangefinder_{n}_type', values[f'rangefinder_{n}_type'],
                     SPECS_BY_NAME[f'rangefinder_{n}_type'])
        if topic:
            if len(configured) != n - 1:
                raise ConfigError(f'rangefinder_{n}_topic: set rangefinder_{len(configured) + 1}'
                                  '_topic first; rangefinders are numbered without gaps')
            configured.append((topic, kind))
    return tuple(configured)


def config_from_parameters(parameters: Mapping[str, Any]) -> BridgeConfig:
    """Validate flat ROS-style parameters (missing ones take their defaults)."""
    groups = parameters.get('output_groups') or []
    group_names = [_text(f'output_groups[{i}]', g)
                   for i, g in enumerate(_list('output_groups', groups))]
    for index, name in enumerate(group_names):
        if not GROUP_NAME.match(name):
            raise ConfigError(f'output_groups[{index}]: {name!r} is no group name (letters, '
                              'digits and _, not first a digit: it is part of parameter names)')
    if len(set(group_names)) != len(group_names):
        raise ConfigError(f'output_groups: names repeat in {group_names}')
    group_settings: Dict[str, Dict[str, Any]] = {name: {} for name in group_names}
    for key, value in parameters.items():
        if key in PARAMETER_DEFAULTS or key == 'output_groups' or key.startswith(
                IGNORED_PREFIXES):
            continue
        parts = key.split('.')
        if len(parts) == 3 and parts[0] == 'outputs':
            if parts[1] not in group_settings:
                raise ConfigError(f'{key}: group {parts[1]!r} is not listed in output_groups')
            group_settings[parts[1]][parts[2]] = value
            continue
        raise ConfigError(f'{shown_name(key)}: unknown parameter'
                          f'{did_you_mean(key, PARAMETER_DEFAULTS)}')
    values = dict(PARAMETER_DEFAULTS)
    values.update({k: v for k, v in parameters.items() if k in PARAMETER_DEFAULTS})
    spec = SPECS_BY_NAME
    mounting = _list('imu_mounting_rpy', values['imu_mounting_rpy'])
    if len(mounting) != 3:
        raise ConfigError(f'imu_mounting_rpy: expected [roll, pitch, yaw] in degrees, got '
                          f'{mounting!r}')
    rangefinders = _rangefinders(values)
    link = LinkSettings(
        instance=_integer('instance', values['instance'], spec['instance']),
        bind_address=_text('bind_address', values['bind_address']),
        port=_integer('port', values['port'], spec['port']),
        fresh_timeout=_number('fresh_timeout', values['fresh_timeout'], spec['fresh_timeout']),
        peer_timeout=_number('peer_timeout', values['peer_timeout'], spec['peer_timeout']),
        hold_timeout=_number('hold_timeout', values['hold_timeout'], spec['hold_timeout']),
        no_time_sync=_flag('no_time_sync', values['no_time_sync']),
        no_lockstep=_flag('no_lockstep', values['no_lockstep']))
    state = StateSettings(
        odometry_only=_flag('odometry_only', values['odometry_only']),
        max_odometry_lag=_number('max_odometry_lag', values['max_odometry_lag'],
                                 spec['max_odometry_lag']),
        max_optional_age=_number('max_optional_age', values['max_optional_age'],
                                 spec['max_optional_age']),
        max_backlog=_number('max_backlog', values['max_backlog'], spec['max_backlog']),
        horizon=_number('horizon', values['horizon'], spec['horizon']),
        rangefinder_count=len(rangefinders))
    inputs = InputSettings(
        odom_topic=_topic('odom_topic', values['odom_topic']),
        imu_topic=_topic('imu_topic', values['imu_topic']),
        imu_mounting_rpy=tuple(_number(f'imu_mounting_rpy[{i}]', v)
                               for i, v in enumerate(mounting)),
        odom_twist_frame=_text('odom_twist_frame', values['odom_twist_frame'],
                               spec['odom_twist_frame']),
        rangefinders=rangefinders,
        wind_topic=_topic('wind_topic', values['wind_topic']),
        airspeed_topic=_topic('airspeed_topic', values['airspeed_topic']),
        battery_topic=_topic('battery_topic', values['battery_topic']),
        rc_topic=_topic('rc_topic', values['rc_topic']))
    if not inputs.odom_topic:
        raise ConfigError('odom_topic: odometry is mandatory')
    if not inputs.imu_topic and not state.odometry_only:
        raise ConfigError('imu_topic: empty, but odometry_only is false')
    outputs = tuple(output_group(name, group_settings[name]) for name in group_names)
    return BridgeConfig(link=link, state=state, inputs=inputs, outputs=outputs,
                        raw_pwm_topic=_topic('raw_pwm_topic', values['raw_pwm_topic']),
                        sim_control=_text('sim_control', values['sim_control'],
                                          spec['sim_control']),
                        sim_control_service=_text('sim_control_service',
                                                  values['sim_control_service']))


def flatten(tree: Mapping[str, Any], prefix: str = '') -> Dict[str, Any]:
    """Nested parameter dicts to ROS's dotted names, as ros2 param load does."""
    flat: Dict[str, Any] = {}
    for key, value in tree.items():
        name = f'{prefix}{key}'
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + '.'))
        else:
            flat[name] = value
    return flat


def load_parameters_file(path: str, node_name: str = NODE_NAME,
                         namespace: str = '') -> Dict[str, Any]:
    """
    Return the flat parameters a ros__parameters YAML file gives one node.

    Sections apply as ROS applies them: '/**' first, then the node's own name with or
    without its namespace.
    """
    try:
        with open(path) as stream:
            document = yaml.safe_load(stream) or {}
    except OSError as error:
        raise ConfigError(f'{path}: cannot read it ({error.strerror or error})') from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ConfigError(f'{path}: not YAML: {one_line(error)}') from None
    if not isinstance(document, Mapping):
        raise ConfigError(f'{path}: expected a mapping of node names to ros__parameters')
    full_name = '/' + '/'.join(p for p in (namespace.strip('/'), node_name) if p)
    parameters: Dict[str, Any] = {}
    for section in ('/**', node_name, full_name):
        body = document.get(section)
        if isinstance(body, Mapping):
            values = body.get('ros__parameters') or {}
            if not isinstance(values, Mapping):
                raise ConfigError(f'{path}: {section}: ros__parameters is not a mapping of '
                                  f'parameter names to values: {values!r}')
            parameters.update(flatten(values))
    if not parameters and document:
        raise ConfigError(f'{path}: no ros__parameters for node {full_name} (sections: '
                          f'{", ".join(map(shown_name, document))})')
    return parameters


def parameter_table() -> str:
    """Return the fixed parameters as docs/parameters.md's Markdown table (a test compares)."""
    rows = ['| parameter | default | description |', '| --- | --- | --- |']
    for spec in PARAMETERS:
        default = spec.default
        if isinstance(default, bool):
            shown = f'`{str(default).lower()}`'
        elif isinstance(default, str):
            shown = f'`{default}`' if default else '(empty)'
        else:
            shown = f'`{default}`'
        read_only = ' Read-only.' if spec.read_only else ''
        rows.append(f'| `{spec.name}` | {shown} | {spec.description}.{read_only} |')
    return '\n'.join(rows) + '\n'


def shipped_preset(name: str) -> Optional[str]:
    """
    Return a preset shipped in config/, or None.

    Beside the package in a checkout (and a --symlink-install), under share/ of a pip
    install's prefix, or of each prefix of a sourced colcon install (AMENT_PREFIX_PATH).
    """
    here = os.path.dirname(os.path.abspath(__file__))
    prefixes = [sys.prefix] + os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep)
    for folder in [os.path.join(here, '..', 'config')] + [
            os.path.join(prefix, 'share', 'ardupilot_json_bridge', 'config')
            for prefix in prefixes if prefix]:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return os.path.normpath(path)
    return None
