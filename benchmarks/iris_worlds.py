"""
ardupilot_gazebo's iris, twice: flown by its ArduPilotPlugin, and by this bridge through ros_gz.

Pure functions (no ROS, no Gazebo) that read the installed `iris_with_ardupilot/model.sdf` and
write, for benchmarks/gazebo_side_by_side.py:
- plugin_world: the model as it is, its ArduPilotPlugin listening for SITL instance N;
- bridge_world: the same model with the ArduPilotPlugin replaced by one JointController per
  <control> block (velocity, force commands through the same PID gains and torque limits),
  each on a gz.msgs.Double topic of its own;
- bridge_preset: the bridge's parameters, a `float64` output group whose channels, PWM range,
  multipliers (838 rad/s, with each rotor's sign) and offsets are the <control> blocks', and
  the IMU's mounting: the pose of the plugin's <imuName> sensor in iris_with_standoffs;
- ros_gz_bridge_config: ros_gz_bridge's topics (clock, IMU, odometry in; rotor commands out),
  the IMU's being Gazebo's default topic of that sensor.
Both worlds are one world (ground plane, 1 ms DART steps, the same systems) with the model at
the pose of ardupilot_gazebo's worlds and the same OdometryPublisher on it: Gazebo's pose of
the model, by which both flights are judged, and the bridge's odometry.
"""

from dataclasses import dataclass
import json
import math
import os
from typing import List, Optional, Sequence, Tuple
from xml.etree import ElementTree

PLUGIN_MODEL = 'iris_with_ardupilot'
# The model iris_with_ardupilot includes, with the rotors and the IMU sensor.
STANDOFFS_MODEL = 'iris_with_standoffs'
MODEL = 'iris'
WORLD = 'iris_side'
# Where ardupilot_gazebo's worlds put the iris: resting on its legs, nose to the north.
MODEL_POSE = '0 0 0.195 0 0 1.5707963267948966'
ODOMETRY_TOPIC = f'/{MODEL}/odometry'
ODOMETRY_RATE = 250
# The bridge's namespace in gazebo.launch.py, and its topics there.
NAMESPACE = 'quad'
# How the bridge sends the rotor speeds: one std_msgs/Float64 per rotor (a gz.msgs.Double per
# JointController), or one actuator_msgs/Actuators for all (each JointController reading its
# actuator_number of the velocity array).
FLOAT64, ACTUATORS = 'float64', 'actuators'
OUTPUT_KINDS = (FLOAT64, ACTUATORS)
ACTUATORS_TOPIC = 'rotors/cmd'
# The <control> settings JointController takes under the same names (its velocity PID).
PID_SETTINGS = ('p_gain', 'i_gain', 'd_gain', 'i_max', 'i_min', 'cmd_max', 'cmd_min')


class ModelError(ValueError):
    """The installed model is not what these worlds are built from; the message says why."""


@dataclass(frozen=True)
class RotorControl:
    """One ArduPilotPlugin <control> block: SERVO channel (1-based) to a joint's velocity."""

    channel: int
    joint: str          # as the plugin names it, scoped from the model
    multiplier: float
    offset: float
    servo_min: float
    servo_max: float
    pid: Tuple[Tuple[str, str], ...]   # (setting, text) of PID_SETTINGS present

    @property
    def name(self) -> str:
        """Return the joint's own name: the part after the nested model's scope."""
        return self.joint.rsplit('::', 1)[-1]

    @property
    def gz_topic(self) -> str:
        return f'/{MODEL}/{self.name}/cmd_vel'

    @property
    def ros_topic(self) -> str:
        """Return the command topic relative to the bridge's namespace."""
        return f'{self.name}/cmd_vel'


def model_path(resource_path: str, name: str = PLUGIN_MODEL) -> Optional[str]:
    """Return the first <name>/model.sdf along a GZ_SIM_RESOURCE_PATH, or None."""
    for folder in filter(None, resource_path.split(os.pathsep)):
        path = os.path.join(folder, name, 'model.sdf')
        if os.path.isfile(path):
            return path
    return None


def loadable(resource_path: str) -> Optional[str]:
    """
    Why Gazebo cannot load the iris from this GZ_SIM_RESOURCE_PATH (one line), or None.

    Gazebo refuses a world with a mesh it cannot resolve: every model:// file that the first
    iris_with_standoffs on the path names must exist (ardupilot_gazebo's snapshot lacks
    meshes/iris.dae; a copy with a box for that visual, first on the path, loads).
    """
    if model_path(resource_path) is None:
        return (f'no {PLUGIN_MODEL}/model.sdf on GZ_SIM_RESOURCE_PATH (the models of '
                'ardupilot_gazebo)')
    path = model_path(resource_path, STANDOFFS_MODEL)
    if path is None:
        return f'no {STANDOFFS_MODEL}/model.sdf on GZ_SIM_RESOURCE_PATH'
    folder = os.path.dirname(os.path.dirname(path))
    with open(path) as stream:
        uris = [uri.text.strip() for uri in ElementTree.parse(stream).iter('uri')]
    for uri in uris:
        if uri.startswith('model://') and not os.path.isfile(
                os.path.join(folder, uri[len('model://'):])):
            return (f'{path} names {uri}, which is missing: Gazebo would refuse the '
                    'world (put a copy with that visual replaced first on '
                    'GZ_SIM_RESOURCE_PATH)')
    return None


def _model(text: str) -> ElementTree.Element:
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise ModelError(f'{PLUGIN_MODEL}/model.sdf is not XML: {error}') from None
    model = root.find('model')
    if model is None:
        raise ModelError(f'{PLUGIN_MODEL}/model.sdf has no <model>')
    return model


def _ardupilot_plugin(model: ElementTree.Element) -> ElementTree.Element:
    plugins = [p for p in model.findall('plugin') if p.get('filename') == 'ArduPilotPlugin']
    if len(plugins) != 1:
        raise ModelError(f'{PLUGIN_MODEL}/model.sdf has {len(plugins)} ArduPilotPlugin '
                         'elements, not one')
    return plugins[0]


def _text(element: ElementTree.Element, tag: str, where: str) -> str:
    child = element.find(tag)
    if child is None or not (child.text or '').strip():
        raise ModelError(f'{where}: no <{tag}>')
    return child.text.strip()


def _number(element: ElementTree.Element, tag: str, where: str) -> float:
    text = _text(element, tag, where)
    try:
        return float(text)
    except ValueError:
        raise ModelError(f'{where}: <{tag}> {text!r} is not a number') from None


def plugin_controls(text: str) -> List[RotorControl]:
    """Return the ArduPilotPlugin's <control> blocks of a model.sdf, by channel (VELOCITY)."""
    controls = []
    for control in _ardupilot_plugin(_model(text)).findall('control'):
        where = f'ArduPilotPlugin <control channel="{control.get("channel")}">'
        try:
            channel = int(control.get('channel', ''))
        except ValueError:
            raise ModelError(f'{where}: the channel is not a number') from None
        kind = _text(control, 'type', where)
        if kind != 'VELOCITY':
            raise ModelError(f'{where}: type {kind}; only VELOCITY controls are mirrored')
        if _text(control, 'useForce', where) not in ('1', 'true'):
            raise ModelError(f'{where}: useForce is off; only force (PID) control is mirrored')
        pid = tuple((name, _text(control, name, where)) for name in PID_SETTINGS
                    if control.find(name) is not None)
        controls.append(RotorControl(
            channel=channel + 1, joint=_text(control, 'jointName', where),
            multiplier=_number(control, 'multiplier', where),
            offset=_number(control, 'offset', where),
            servo_min=_number(control, 'servo_min', where),
            servo_max=_number(control, 'servo_max', where), pid=pid))
    if not controls:
        raise ModelError('the ArduPilotPlugin has no <control> blocks')
    return sorted(controls, key=lambda c: c.channel)


def _odometry_publisher() -> ElementTree.Element:
    plugin = ElementTree.Element('plugin', filename='gz-sim-odometry-publisher-system',
                                 name='gz::sim::systems::OdometryPublisher')
    for tag, text in (('dimensions', '3'), ('odom_publish_frequency', str(ODOMETRY_RATE)),
                      ('odom_topic', ODOMETRY_TOPIC), ('odom_frame', f'{MODEL}/odom'),
                      ('robot_base_frame', f'{MODEL}/base_link')):
        ElementTree.SubElement(plugin, tag).text = text
    return plugin


def _world(model: ElementTree.Element) -> str:
    """Return the one world of both flights, with model (renamed, posed, odometry) in it."""
    model.set('name', MODEL)
    for pose in model.findall('pose'):
        model.remove(pose)
    pose = ElementTree.Element('pose')
    pose.text = MODEL_POSE
    model.insert(0, pose)
    model.append(_odometry_publisher())
    systems = ''.join(f'\n    <plugin filename="gz-sim-{name}-system" '
                      f'name="gz::sim::systems::{system}"/>'
                      for name, system in (('physics', 'Physics'),
                                           ('user-commands', 'UserCommands'),
                                           ('scene-broadcaster', 'SceneBroadcaster'),
                                           ('imu', 'Imu')))
    ground = ('<geometry><plane><normal>0 0 1</normal><size>200 200</size></plane>'
              '</geometry>')
    ElementTree.indent(model, '  ', level=2)
    return f"""<?xml version="1.0" ?>
<!-- Generated by benchmarks/iris_worlds.py from ardupilot_gazebo's {PLUGIN_MODEL}. -->
<sdf version="1.9">
  <world name="{WORLD}">
    <physics name="1ms" type="ignored">
      <max_step_size>0.001</max_step_size>
      <real_time_factor>1.0</real_time_factor>
    </physics>{systems}
    <model name="ground_plane">
      <static>true</static>
      <link name="link">
        <collision name="collision">{ground}</collision>
        <visual name="visual">{ground}</visual>
      </link>
    </model>
    {ElementTree.tostring(model, encoding='unicode').strip()}
  </world>
</sdf>
"""


def plugin_world(text: str, instance: int) -> str:
    """Return the world of the plugin's flight: its ArduPilotPlugin for SITL instance N."""
    model = _model(text)
    port = _ardupilot_plugin(model).find('fdm_port_in')
    if port is None:
        raise ModelError('the ArduPilotPlugin has no <fdm_port_in>')
    port.text = str(9002 + 10 * instance)
    return _world(model)


def bridge_world(text: str, kind: str = FLOAT64) -> str:
    """
    Return the world of the bridge's flight: JointControllers for the ArduPilotPlugin.

    Each goes into the <include> of the nested model that owns its joint (JointController finds
    joints by their name within its own model, not by a scoped name), with the plugin's PID
    gains and limits, taking rad/s on RotorControl.gz_topic (float64), or from the velocity
    array of one gz.msgs.Actuators, element k for the k-th control by channel (actuators).
    """
    controls = plugin_controls(text)
    model = _model(text)
    model.remove(_ardupilot_plugin(model))
    includes = {}
    for include in model.findall('include'):
        name = include.findtext('name') or os.path.basename(
            (include.findtext('uri') or '').rstrip('/'))
        includes[name] = include
    for control in controls:
        scope, _, joint = control.joint.rpartition('::')
        if scope not in includes:
            raise ModelError(f'channel {control.channel}: joint {control.joint} is not in a '
                             f'model the iris includes ({", ".join(includes) or "none"})')
        plugin = ElementTree.SubElement(includes[scope], 'plugin',
                                        filename='gz-sim-joint-controller-system',
                                        name='gz::sim::systems::JointController')
        command = ((('topic', control.gz_topic),) if kind == FLOAT64 else (
            ('topic', f'/{MODEL}/{ACTUATORS_TOPIC}'), ('use_actuator_msg', 'true'),
            ('actuator_number', str(controls.index(control)))))
        settings = (('joint_name', joint), *command, ('use_force_commands', 'true'),
                    *control.pid)
        for tag, value in settings:
            ElementTree.SubElement(plugin, tag).text = value
    return _world(model)


def _yaml_list(values: Sequence) -> str:
    return json.dumps(list(values))


def topics(controls: Sequence[RotorControl], kind: str) -> str:
    """Return the preset's topic line(s) of the rotors' group for an output kind."""
    if kind == FLOAT64:
        return f'topics: {_yaml_list(c.ros_topic for c in controls)}'
    return f'topic: {ACTUATORS_TOPIC}\n        field: velocity'


def bridge_preset(controls: Sequence[RotorControl], instance: int, kind: str,
                  mounting: Tuple[float, float, float]) -> str:
    """Return the bridge's parameters (YAML) for bridge_world: its JointControllers, the IMU."""
    return f"""# Generated by benchmarks/iris_worlds.py from the <control> blocks of the plugin.
/**:
  ros__parameters:
    instance: {instance}
    odom_topic: odom
    imu_topic: imu
    imu_mounting_rpy: {_yaml_list(mounting)}
    odom_twist_frame: child
    raw_pwm_topic: ''
    output_groups: [rotors]
    outputs:
      rotors:
        type: {kind}
        {topics(controls, kind)}
        channels: {_yaml_list(c.channel for c in controls)}
        servo_min: {_yaml_list(c.servo_min for c in controls)}
        servo_max: {_yaml_list(c.servo_max for c in controls)}
        multiplier: {_yaml_list(c.multiplier for c in controls)}
        offset: {_yaml_list(c.offset for c in controls)}
"""


def imu(text: str, standoffs: str) -> Tuple[str, Tuple[float, float, float]]:
    """
    Return Gazebo's topic of the plugin's IMU and its mounting (roll, pitch, yaw degrees).

    text is iris_with_ardupilot/model.sdf, whose ArduPilotPlugin names the sensor in <imuName>
    (model::link::sensor); standoffs is that model's model.sdf. The sensor names no <topic>, so
    Gazebo publishes on its scoped default; the mounting is the sensor's <pose> in an
    unrotated link (ardupilot_gazebo's: 180 0 0, upside down: FRD).
    """
    name = _text(_ardupilot_plugin(_model(text)), 'imuName', 'the ArduPilotPlugin')
    parts = name.split('::')
    if len(parts) != 3 or parts[0] != STANDOFFS_MODEL:
        raise ModelError(f"the ArduPilotPlugin's <imuName> {name!r} is not "
                         f'{STANDOFFS_MODEL}::<link>::<sensor>')
    scope, link_name, sensor_name = parts
    links = [link for link in _model(standoffs).findall('link') if link.get('name') == link_name]
    sensors = [sensor for link in links for sensor in link.findall('sensor')
               if sensor.get('name') == sensor_name and sensor.get('type') == 'imu']
    if len(sensors) != 1:
        raise ModelError(f'{STANDOFFS_MODEL}/model.sdf has {len(sensors)} IMU sensors '
                         f"{link_name}::{sensor_name} (the plugin's <imuName>), not one")
    if sensors[0].find('topic') is not None:
        raise ModelError(f'{name} names a <topic>; only the default topic is mirrored')
    if _angles(links[0].find('pose'), name) != (0.0, 0.0, 0.0):
        raise ModelError(f'{name}: its link is rotated; only an unrotated link is mirrored')
    topic = (f'/world/{WORLD}/model/{MODEL}/model/{scope}/link/{link_name}/sensor/'
             f'{sensor_name}/imu')
    return topic, _angles(sensors[0].find('pose'), name)


def _angles(pose: Optional[ElementTree.Element], where: str) -> Tuple[float, float, float]:
    """Return a <pose>'s roll, pitch and yaw in degrees (none: zero)."""
    if pose is None:
        return (0.0, 0.0, 0.0)
    try:
        values = [float(value) for value in (pose.text or '').split()]
    except ValueError:
        values = []
    if len(values) != 6:
        raise ModelError(f'{where}: <pose> {pose.text!r} is not six numbers')
    degrees = pose.get('degrees', 'false').strip() in ('true', '1')
    return tuple(value if degrees else math.degrees(value)  # type: ignore[return-value]
                 for value in values[3:])


def _entry(ros: str, gz: str, ros_type: str, gz_type: str, direction: str) -> str:
    return (f'- ros_topic_name: {ros}\n  gz_topic_name: {gz}\n  ros_type_name: {ros_type}\n'
            f'  gz_type_name: {gz_type}\n  direction: {direction}\n')


def odometry_entry() -> str:
    """ros_gz_bridge's entry for Gazebo's odometry of the model, in the bridge's namespace."""
    return _entry(f'/{NAMESPACE}/odom', ODOMETRY_TOPIC, 'nav_msgs/msg/Odometry',
                  'gz.msgs.Odometry', 'GZ_TO_ROS')


def ros_gz_bridge_config(controls: Sequence[RotorControl], kind: str, imu_topic: str) -> str:
    """
    ros_gz_bridge's topics (YAML) for the bridge's flight; imu_topic: imu()'s.

    Written by hand, not by launch_config.gazebo_bridge_topics: that rule is the Gazebo fleet's
    (quad_x.sdf's topics under each namespace, one actuators group), not this model's.
    """
    return ''.join([
        '# Generated by benchmarks/iris_worlds.py.\n',
        _entry('/clock', '/clock', 'rosgraph_msgs/msg/Clock', 'gz.msgs.Clock', 'GZ_TO_ROS'),
        _entry(f'/{NAMESPACE}/imu', imu_topic, 'sensor_msgs/msg/Imu', 'gz.msgs.IMU',
               'GZ_TO_ROS'),
        odometry_entry(),
        *((_entry(f'/{NAMESPACE}/{c.ros_topic}', c.gz_topic, 'std_msgs/msg/Float64',
                  'gz.msgs.Double', 'ROS_TO_GZ') for c in controls) if kind == FLOAT64 else
          [_entry(f'/{NAMESPACE}/{ACTUATORS_TOPIC}', f'/{MODEL}/{ACTUATORS_TOPIC}',
                  'actuator_msgs/msg/Actuators', 'gz.msgs.Actuators', 'ROS_TO_GZ')])])
