"""
What the launch files start, decided without launch_ros so it can be tested anywhere.

Launch arguments arrive as strings; these functions validate them and return the node
configurations (namespace, instance, port, parameters) the launch files hand to launch_ros.
"""

from dataclasses import dataclass
import os
import re
import shlex
from typing import Any, Dict, List, Tuple, Union

from ardupilot_json_bridge.config import (
    BridgeConfig, check_number, config_from_parameters, ConfigError, load_parameters_file,
    NODE_NAME, one_line, RATE_LIMITS)
from ardupilot_json_bridge.core.pwm import ActuatorField, OutputKind
from ardupilot_json_bridge.core.settings import MAX_FLEET, MAX_INSTANCE, sitl_port
from ardupilot_json_bridge.sources.replay import resolve_topic

NAMESPACE = re.compile(r'^[A-Za-z][A-Za-z0-9_]*(/[A-Za-z][A-Za-z0-9_]*)*$')
# Slower than real time only: SITL paces itself to the wall clock unless given --speedup.
MAX_REAL_TIME_FACTOR = 1.0
# gazebo.launch.py's and gazebo_fleet.launch.py's arguments for how Gazebo runs.
SERVER_ONLY_HELP = 'Gazebo without its GUI (true where there is no display)'
REAL_TIME_FACTOR_HELP = ('Simulated seconds a wall second, at most 1 (empty: '
                         "the world's own; 0.5 for a busy or small machine)")


class LaunchArgumentError(ValueError):
    """A launch argument that cannot work; the message names it."""


@dataclass(frozen=True)
class VehicleLaunch:
    """One bridge node: where it lives and which SITL instance it serves."""

    namespace: str
    instance: int

    @property
    def port(self) -> int:
        return sitl_port(self.instance)


def parse_bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ('true', '1', 'yes', 'on'):
        return True
    if lowered in ('false', '0', 'no', 'off'):
        return False
    raise LaunchArgumentError(f'{name}: expected true or false, got {text!r}')


def parse_count(name: str, text: str, minimum: int, maximum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise LaunchArgumentError(f'{name}: expected a whole number, got {text!r}') from None
    if not minimum <= value <= maximum:
        raise LaunchArgumentError(f'{name}: {value} is outside {minimum}..{maximum}')
    return value


def parse_rate(name: str, text: str) -> float:
    try:
        return check_number(name, _parse_number(name, text, 'a rate in Hz'), RATE_LIMITS)
    except ConfigError as error:
        raise LaunchArgumentError(str(error)) from None


def parse_real_time_factor(name: str, text: str) -> float:
    """Parse how fast simulated time runs against the wall clock (0.5: half speed)."""
    return check_real_time_factor(name, _parse_number(name, text, 'a real-time factor'))


def check_real_time_factor(name: str, value: float) -> float:
    """Return value if it is a real-time factor the simulator can run at, above 0 and up to 1."""
    if not 0.0 < value <= MAX_REAL_TIME_FACTOR:
        raise LaunchArgumentError(
            f'{name}: {value:g} is not above 0 and at most {MAX_REAL_TIME_FACTOR:g} (0.5 runs '
            'the simulation at half the wall clock; SITL keeps to the wall clock, so faster '
            "than real time needs SITL's --speedup: use the lock-step mujoco command)")
    return value


def _parse_number(name: str, text: str, what: str) -> float:
    """Parse a number; the error names the launch argument and what it expected."""
    try:
        return float(text)
    except ValueError:
        raise LaunchArgumentError(f'{name}: expected {what}, got {text!r}') from None


def parse_namespace(name: str, text: str) -> str:
    namespace = text.strip().strip('/')
    if namespace and not NAMESPACE.match(namespace):
        raise LaunchArgumentError(f'{name}: {text!r} is not a valid ROS namespace')
    return namespace


def check_params_file(params_file: str) -> str:
    """
    Return params_file if it is empty or a file; a missing one is a launch error.

    launch_ros only warns about a missing file and starts the node on its defaults, which for
    the bridge means no output groups: SITL arms and no command is ever published.
    """
    if params_file and not os.path.isfile(params_file):
        raise LaunchArgumentError(f'params_file: {params_file!r} is not a file')
    return params_file


def bridge_parameters(instance: int, use_sim_time: bool,
                      params_file: str) -> List[Union[str, Dict[str, Any]]]:
    """Return the parameters list of one bridge node: the file first, launch arguments over it."""
    parameters: List[Union[str, Dict[str, Any]]] = \
        [check_params_file(params_file)] if params_file else []
    parameters.append({'instance': instance, 'use_sim_time': use_sim_time})
    return parameters


def bridge_node_arguments(vehicle: VehicleLaunch, use_sim_time: bool,
                          params_file: str) -> Dict[str, Any]:
    """Keyword arguments of launch_ros.actions.Node for one vehicle's bridge."""
    return {'package': 'ardupilot_json_bridge', 'executable': 'bridge',
            'name': 'json_sitl_bridge', 'namespace': vehicle.namespace, 'output': 'screen',
            'parameters': bridge_parameters(vehicle.instance, use_sim_time, params_file)}


def single_vehicle(namespace: str, instance: str) -> VehicleLaunch:
    """bridge.launch.py's vehicle from its namespace and instance arguments."""
    return VehicleLaunch(parse_namespace('namespace', namespace),
                         parse_count('instance', instance, 0, MAX_INSTANCE))


def fleet(count: str, prefix: str, first_instance: str) -> List[VehicleLaunch]:
    """
    fleet.launch.py's vehicles: <prefix><instance> in namespaces, instances in a row.

    Instance N listens on 9002 + 10 N, which is where sim_vehicle.py -I N sends.
    """
    number = parse_count('count', count, 1, MAX_FLEET)
    first = parse_count('first_instance', first_instance, 0,
                        MAX_INSTANCE - number + 1)
    base = parse_namespace('namespace_prefix', prefix)
    if not base:
        raise LaunchArgumentError('namespace_prefix: vehicles need a namespace prefix')
    return [VehicleLaunch(f'{base}{first + i}', first + i) for i in range(number)]


def clock_topic(vehicle: VehicleLaunch, count: int) -> str:
    """
    Return the clock of a vehicle's own simulation: /clock alone, /<namespace>/clock in a fleet.

    Each mujoco_sim is a simulation of its own, started at its own moment: two on one /clock
    would interleave two times, so in a fleet each vehicle's simulator and bridge share theirs.
    """
    return '/clock' if count == 1 else f'/{vehicle.namespace}/clock'


def simulator_node_arguments(vehicle: VehicleLaunch, clock: str, imu_rate: float,
                             odom_rate: float, real_time_factor: float = 1.0,
                             params_file: str = '') -> Dict[str, Any]:
    """
    Keyword arguments of launch_ros.actions.Node for one vehicle's mujoco_sim.

    params_file, the bridge's, is the simulator's preset too: it takes its commands on the
    topics and in the message types the bridge publishes them with, and refuses in one line a
    file whose outputs do not fit its model.
    """
    parameters: Dict[str, Any] = {'imu_rate': imu_rate, 'odom_rate': odom_rate,
                                  'real_time_factor': real_time_factor}
    if params_file:
        parameters['preset'] = check_params_file(params_file)
    return {'package': 'ardupilot_json_bridge', 'executable': 'mujoco_sim',
            'name': 'mujoco_sim', 'namespace': vehicle.namespace, 'output': 'screen',
            'parameters': [parameters], 'remappings': clock_remappings(clock)}


def clock_remappings(clock: str) -> List[Tuple[str, str]]:
    """Return a node's remappings putting its /clock on clock."""
    return [('/clock', clock)] if clock != '/clock' else []


# SDF's default physics step (sdformat's physics.sdf: max_step_size 0.001 s).
SDF_DEFAULT_STEP = 0.001
# `gz sim -z` in lock-step: Gazebo paces even the steps it is asked for (multi_step) to its
# update rate (100 steps of 1 ms took 102 ms at the world's own pace, 48 ms at this rate), so
# a rate no machine reaches leaves the pace to SITL and the bridge.
UNPACED_RATE = 1e6


def _world_root(world: str, needs: str) -> Any:
    """Return an SDF world file's root element; what needs it reads it (one line if not)."""
    import xml.etree.ElementTree as ElementTree
    try:
        return ElementTree.parse(world).getroot()
    except (OSError, ElementTree.ParseError) as error:
        raise LaunchArgumentError(
            f'world: {needs} needs an SDF world file it can read, got {world!r} '
            f'({error})') from None


def world_step(world: str) -> float:
    """
    Return the physics step of an SDF world file (its <physics><max_step_size>), in seconds.

    Gazebo runs a world at real_time_factor x real time by stepping it 1 / step x
    real_time_factor times a wall second; `gz sim -z` sets that rate instead.
    """
    root = _world_root(world, 'real_time_factor')
    text = root.findtext('./world/physics/max_step_size')
    if text is None:
        return SDF_DEFAULT_STEP
    step = _parse_number('world', text, 'a <max_step_size> in seconds')
    if not step > 0.0:
        raise LaunchArgumentError(f'world: <max_step_size> {text!r} is not above 0')
    return step


def world_name(world: str) -> str:
    """Return the name of an SDF file's world: its control service is /world/<name>/control."""
    element = _world_root(world, 'sim_control').find('./world')
    name = '' if element is None else element.get('name', '').strip()
    if not name:
        raise LaunchArgumentError(f'world: {world!r} has no <world name="...">')
    return name


def control_service(world: str) -> str:
    """Return the world's ControlWorld service, as Gazebo names it and ros_gz_bridge bridges it."""
    return f'/world/{world_name(world)}/control'


def gazebo_arguments(world: str, server_only: bool, real_time_factor: str,
                     lock_step: bool = False) -> str:
    """
    Return `gz sim`'s arguments for gazebo.launch.py: running, the world, GUI or not, pace.

    server_only (-s) runs without the GUI, which aborts where there is no display and takes
    the server with it. real_time_factor ('' keeps the world's own) becomes `-z`, Gazebo's
    update rate: the world's steps a wall second at that factor. lock_step starts the world
    paused (no -r), for the bridge to step, unpaced (UNPACED_RATE).
    """
    arguments = [] if lock_step else ['-r']
    if server_only:
        arguments.append('-s')
    if lock_step:
        if real_time_factor.strip():
            raise LaunchArgumentError(
                'real_time_factor: in lock-step (sim_control:=gz_control_world) SITL and '
                'Gazebo run as fast as they can together; leave real_time_factor empty')
        arguments.append(f'-z {UNPACED_RATE:g}')
    elif real_time_factor.strip():
        factor = parse_real_time_factor('real_time_factor', real_time_factor)
        arguments.append(f'-z {factor / world_step(world):g}')
    # ros_gz_sim runs `gz sim <gz_args>` through a shell.
    return ' '.join(arguments + [shlex.quote(world)])


def parse_gazebo_sim_control(value: str) -> bool:
    """Return whether gazebo.launch.py's bridge steps Gazebo (sim_control:=gz_control_world)."""
    if value not in ('none', 'gz_control_world'):
        raise LaunchArgumentError(f'sim_control: {value!r} is not none or gz_control_world')
    return value == 'gz_control_world'


# Vehicle k of a Gazebo fleet starts this far north (ENU y) of vehicle 0, in metres.
FLEET_SPACING = 3.0


def gazebo_preset(params_file: str, namespace: str) -> BridgeConfig:
    """
    Return the bridge configuration params_file gives the bridge in namespace, if it can fly.

    The Gazebo fleet's model (config/worlds/quad_x.sdf's quad) publishes an IMU and odometry
    and takes its motors' speeds as gz.msgs.Actuators velocity: the file needs one output group
    of type actuators, field velocity, or its bridge would command nothing (one launch error).
    """
    try:
        preset = config_from_parameters(load_parameters_file(
            check_params_file(params_file), NODE_NAME, namespace) if params_file else {})
    except ConfigError as error:
        raise LaunchArgumentError(f'params_file: {one_line(error)}') from None
    groups = [f'{g.name} ({g.kind.value}, {g.field.value})' for g in preset.outputs]
    if len(groups) != 1 or preset.outputs[0].kind is not OutputKind.ACTUATORS or \
            preset.outputs[0].field is not ActuatorField.VELOCITY:
        raise LaunchArgumentError(
            f'params_file: {params_file or "(none)"!r} gives the bridge in {namespace} output '
            f'groups [{", ".join(groups)}]; the Gazebo fleet\'s motors take one group of type '
            'actuators, field velocity')
    return preset


def gazebo_bridge_topics(namespaces: List[str], params_file: str) -> List[Dict[str, str]]:
    """
    Return ros_gz_bridge's configuration for vehicles in namespaces: one /clock, their topics.

    Each vehicle's Gazebo topics are those of config/worlds/quad_x.sdf's quad under its
    namespace (/<ns>/imu, /<ns>/odometry, /<ns>/command/motor_speed); the ROS side is where
    the bridge with params_file reads and writes them in that namespace (gazebo_preset).
    """
    entries = [{'ros_topic_name': '/clock', 'gz_topic_name': '/clock',
                'ros_type_name': 'rosgraph_msgs/msg/Clock', 'gz_type_name': 'gz.msgs.Clock',
                'direction': 'GZ_TO_ROS'}]
    for namespace in namespaces:
        preset = gazebo_preset(params_file, namespace)
        if preset.inputs.imu_topic:
            entries.append(
                {'ros_topic_name': resolve_topic(namespace, preset.inputs.imu_topic),
                 'gz_topic_name': f'/{namespace}/imu', 'ros_type_name': 'sensor_msgs/msg/Imu',
                 'gz_type_name': 'gz.msgs.IMU', 'direction': 'GZ_TO_ROS'})
        entries += [
            {'ros_topic_name': resolve_topic(namespace, preset.inputs.odom_topic),
             'gz_topic_name': f'/{namespace}/odometry', 'ros_type_name': 'nav_msgs/msg/Odometry',
             'gz_type_name': 'gz.msgs.Odometry', 'direction': 'GZ_TO_ROS'},
            {'ros_topic_name': resolve_topic(namespace, preset.outputs[0].topic),
             'gz_topic_name': f'/{namespace}/command/motor_speed',
             'ros_type_name': 'actuator_msgs/msg/Actuators', 'gz_type_name': 'gz.msgs.Actuators',
             'direction': 'ROS_TO_GZ'}]
    names = [entry['ros_topic_name'] for entry in entries]
    shared = sorted({name for name in names if names.count(name) > 1})
    if shared:
        raise LaunchArgumentError(f'params_file: {shared[0]} would carry the topics of more '
                                  'than one vehicle (or two of one); name topics relative to '
                                  'the namespace')
    return entries


def _rescoped(text: str, old: str, new: str, name: str) -> str:
    """
    Return text with the scope old put under new instead, and /model/old/... under name.

    Scopes: the whole text old, a start /old/ or old/, and a path part model/old (Gazebo's
    /model/<model name>/... topics), which becomes model/name (the copy's model name).
    """
    for before, after in ((old, new), (f'/{old}/', f'/{new}/'), (f'{old}/', f'{new}/')):
        if text == before or (before.endswith('/') and text.startswith(before)):
            text = after + text[len(before):]
            break
    return re.sub(rf'(^|/)model/{re.escape(old)}(?=/|$)', rf'\g<1>model/{name}', text)


# What can name a model from outside it: attributes (SDF 1.8+ frames and poses) and the text
# of a world-level joint's parent and child.
MODEL_REFERENCES = ('attached_to', 'relative_to')
MODEL_REFERENCE_TAGS = ('parent', 'child')


def _check_no_reference(template: str, world: Any, model: str) -> None:
    """Refuse (one line naming the element) a world element that refers to the model."""
    def refers(value: str) -> bool:
        return value.strip() == model or value.strip().startswith(f'{model}::')

    for part in world:
        for element in part.iter():
            names = [f'{key}="{element.get(key)}"' for key in MODEL_REFERENCES
                     if refers(element.get(key, ''))]
            if element.tag in MODEL_REFERENCE_TAGS and refers(element.text or ''):
                names.append(f'text {element.text.strip()!r}')
            if not names:
                continue
            where = '' if element is part else f' in <{part.tag} name="{part.get("name")}">'
            shown = f'<{element.tag} name="{element.get("name")}">' if element.get('name') \
                else f'<{element.tag}>'
            raise LaunchArgumentError(
                f'world: {template!r}: {shown} {names[0]}{where} outside the model {model!r} '
                'refers to it, but the fleet replaces it by one copy per vehicle')


def _shifted_pose(template: str, text: str, north: float) -> str:
    """Return SDF pose text with y moved north metres; the other values' text as it was."""
    values = text.split() or ['0'] * 6
    try:
        numbers = [float(value) for value in values]
    except ValueError:
        numbers = []
    if len(numbers) not in (6, 7):
        raise LaunchArgumentError(f'world: {template!r}: <pose> {text!r} of the model is '
                                  'not 6 (or 7) numbers')
    if north:
        values[1] = repr(numbers[1] + north)
    return ' '.join(values)


def fleet_world(template: str, model: str, namespaces: List[str],
                spacing: float = FLEET_SPACING) -> str:
    """
    Return an SDF world of template's world with its model `model` once per namespace.

    Copy k is named after namespaces[k] (a '/' becomes '_'), stands spacing x k metres north
    of the template model's pose (its y moved, the rest as written), and every text in it
    scoped by the model's name (the whole text, a start /quad/ or quad/: topics /quad/imu, the
    motors' robotNamespace quad, frames quad/odom) is scoped by namespaces[k] instead, and
    model/quad in a path (/model/quad/odometry) by the copy's name: each copy's sensors and
    motors are its own. Names inside other texts are left as they are; an element outside
    the model that refers to it (attached_to, relative_to, a joint's parent or child) is a
    launch error.
    """
    import copy
    import xml.etree.ElementTree as ElementTree
    root = _world_root(template, 'a Gazebo fleet')
    world = root.find('./world')
    vehicles = [] if world is None else \
        [element for element in world.findall('./model') if element.get('name') == model]
    if not vehicles:
        raise LaunchArgumentError(f'world: {template!r} has no <model name="{model}"> in its '
                                  'world to make the fleet of')
    vehicle = vehicles[0]
    place = list(world).index(vehicle)
    world.remove(vehicle)
    _check_no_reference(template, world, model)
    pose = vehicle.find('pose')
    pose_text = '' if pose is None else (pose.text or '')
    for index, namespace in enumerate(namespaces):
        each = copy.deepcopy(vehicle)
        name = namespace.replace('/', '_')
        each.set('name', name)
        for element in each.iter():
            text = (element.text or '').strip()
            if text and _rescoped(text, model, namespace, name) != text:
                element.text = _rescoped(text, model, namespace, name)
        element = each.find('pose')
        if element is None:
            element = ElementTree.SubElement(each, 'pose')
        element.text = _shifted_pose(template, pose_text, spacing * index)
        world.insert(place + index, each)
    return ElementTree.tostring(root, encoding='unicode')


def write_gazebo_fleet(template: str, model: str, namespaces: List[str], params_file: str,
                       folder: str) -> Tuple[str, str]:
    """
    Write the fleet's world (fleet_world) and ros_gz_bridge file into folder; return both paths.

    Gazebo and parameter_bridge take files: the launch writes them when it runs. The bridge
    file's ROS side is where the bridges with params_file read and write (gazebo_bridge_topics).
    """
    import yaml
    text = fleet_world(template, model, namespaces)
    topics = gazebo_bridge_topics(namespaces, params_file)
    world = os.path.join(folder, 'fleet_world.sdf')
    bridge = os.path.join(folder, 'gz_bridge_fleet.yaml')
    with open(world, 'w') as stream:
        stream.write(text)
    with open(bridge, 'w') as stream:
        yaml.safe_dump(topics, stream, sort_keys=False)
    return world, bridge
