"""
mujoco_sim: the MuJoCo vehicle as a free-running ROS 2 simulator, like Gazebo.

Publishes /clock, `imu` (sensor_msgs/Imu, FLU, every physics step) and `odom`
(nav_msgs/Odometry, ENU pose, twist in the child frame, at odom_rate), and takes its
actuators' commands on the topics its preset's output groups name, as the bridge publishes
them: the quad's rotor speeds in rad/s on `command/motor_speed` (std_msgs/Float64MultiArray as
ros2_control forward controllers take, or actuator_msgs/Actuators velocity as Gazebo's
MulticopterMotorModel does), the rover's steering and wheel joints on its controllers' command
topics. A vehicle with aerodynamics (the plane) also
publishes `airspeed` (std_msgs/Float64, m/s) and `wind` (geometry_msgs/Vector3Stamped, ENU,
m/s) with the odometry: the air it flies in, blown by the wind and gust parameters. Topics are
relative, so namespaces apply. Physics runs in a thread paced to the wall clock by sleeping:
real_time_factor simulated seconds a wall second (1 by default; at 0.5 the simulator, bridge
and SITL have twice the wall time for each step, for a small or busy machine).
With vehicles:=N, N copies of the vehicle fly in one world, each with its topics under
<namespace_prefix>0 .. <namespace_prefix>N-1 (one /clock). It serves simulation_interfaces
(simulation_server.py) where that is installed; with paused:=true it steps only when asked,
by a bridge with sim_control (lock-step through ROS, docs/lockstep.md).
"""

from dataclasses import replace
import os
import sys
import threading
import time
from typing import Any, List, Optional, Sequence

from geometry_msgs.msg import Vector3Stamped
from nav_msgs.msg import Odometry
import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import InvalidTopicNameException, ParameterException
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Imu
from std_msgs.msg import Float64, Float64MultiArray

from ardupilot_json_bridge.config import (
    check_number, config_from_parameters, ConfigError, FLEET_LIMITS, Limits,
    load_parameters_file, NODE_NAME, RATE_LIMITS, shipped_preset)
from ardupilot_json_bridge.core.pwm import OutputGroup, OutputKind
from ardupilot_json_bridge.messages.commands import group_topics
from ardupilot_json_bridge.messages.inputs import time_parts
from ardupilot_json_bridge.ros.launch_config import check_real_time_factor
from ardupilot_json_bridge.ros.node import COMMAND_QOS, run_node
from ardupilot_json_bridge.sources.mujoco_vehicle import (
    advance_together, DEFAULT_VEHICLE, load_world, MODELS_DIR, MujocoVehicle, VehicleError,
    VEHICLES)
from ardupilot_json_bridge.sources.wind import GUST_LIMITS, Wind

# Commands are taken with node.COMMAND_QOS, the QoS the bridge publishes them with.
# Sensors: reliable like ros_gz_bridge; best-effort subscribers receive them too.
SENSOR_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                        reliability=ReliabilityPolicy.RELIABLE)
CLOCK_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                       reliability=ReliabilityPolicy.BEST_EFFORT)
# Every parameter is read at start-up only, so a set is refused rather than "succeeding" and
# changing nothing. Numeric ones take integers too: imu_rate:=250 is a ROS user's spelling.
START_UP = ParameterDescriptor(read_only=True)
NUMBER = ParameterDescriptor(dynamic_typing=True, read_only=True)
# How far physics may fall behind the wall clock before the simulator stops catching up.
MAX_LAG = 0.1


class MujocoSim(Node):
    """A free-running MuJoCo vehicle with Gazebo-like topics."""

    def _number(self, name: str, default: float, limits: Limits = Limits()) -> float:
        """Declare a number that may be given as an integer (imu_rate:=250) and return it."""
        return check_number(name, self.declare_parameter(name, default, NUMBER).value, limits)

    def _numbers(self, name: str, default: List[float]) -> List[float]:
        """Declare a list of numbers that may be integers (wind:=[5, 0, 0]) and return it."""
        value = self.declare_parameter(name, default, NUMBER).value
        if isinstance(value, (str, bytes, bool)) or not isinstance(value, Sequence):
            raise ValueError(f'{name}: {value!r} is not a list of numbers')
        return [check_number(f'{name}[{index}]', v) for index, v in enumerate(value)]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__('mujoco_sim', **kwargs)
        name = self.declare_parameter('vehicle', DEFAULT_VEHICLE, START_UP).value
        if name not in VEHICLES:
            raise ValueError(f'vehicle: {name!r} is not one of {", ".join(VEHICLES)}')
        model = self.declare_parameter('model', '', START_UP).value
        preset = self.declare_parameter('preset', '', START_UP).value
        self.rate = self._number('imu_rate', 1000.0, RATE_LIMITS)
        odom_rate = self._number('odom_rate', 250.0, Limits(0.0, self.rate, above=True))
        self.real_time_factor = check_real_time_factor(
            'real_time_factor', self._number('real_time_factor', 1.0))
        command_type = self.declare_parameter('command_type', '', START_UP).value
        paused = self.declare_parameter('paused', False, START_UP).value
        self.frame_id = self.declare_parameter('frame_id', 'odom', START_UP).value
        self.child_frame_id = self.declare_parameter('child_frame_id', 'base_link',
                                                     START_UP).value
        count = int(check_number('vehicles', self.declare_parameter('vehicles', 1, START_UP).value,
                                 FLEET_LIMITS))
        prefix = self.declare_parameter('namespace_prefix', 'vehicle', START_UP).value
        wind = self._numbers('wind', [0.0, 0.0, 0.0])
        gust = self._number('gust', 0.0, GUST_LIMITS)
        shipped = VEHICLES[name]
        path = model or os.path.join(MODELS_DIR, shipped.model)
        world = load_world(path, count)
        self.vehicles = [MujocoVehicle(path, world, index) for index in range(count)]
        for vehicle in self.vehicles:
            vehicle.reset()
        self.vehicle = self.vehicles[0]
        self.namespaces = [f'{prefix}{index}/' if count > 1 else '' for index in range(count)]
        self._air = [None] * count
        if self.vehicle.aero is not None:
            for vehicle, ns in zip(self.vehicles, self.namespaces):
                try:
                    vehicle.wind = Wind(wind, gust)
                except ValueError as error:
                    raise ValueError(str(error)) from None
                air = (self.create_publisher(Float64, f'{ns}airspeed', SENSOR_QOS),
                       self.create_publisher(Vector3Stamped, f'{ns}wind', SENSOR_QOS),
                       Float64(), Vector3Stamped())
                air[3].header.frame_id = self.frame_id
                self._air[vehicle.index] = air
        elif any(wind) or gust:
            raise ValueError(f'wind: {self.vehicle.path} has no aerodynamics to feel a wind')
        groups = command_groups(preset or shipped_preset(shipped.preset), command_type,
                                self.get_namespace())
        self.odom_every = max(1, round(self.rate / odom_rate))
        self.imu_publishers = [self.create_publisher(Imu, f'{ns}imu', SENSOR_QOS)
                               for ns in self.namespaces]
        self.odom_publishers = [self.create_publisher(Odometry, f'{ns}odom', SENSOR_QOS)
                                for ns in self.namespaces]
        self.clock_publisher = self.create_publisher(Clock, '/clock', CLOCK_QOS)
        self._lock = threading.Lock()
        self._pending = [np.zeros(vehicle.actuator_count) for vehicle in self.vehicles]
        self._changed = [False] * count
        topics = '; '.join(self._subscribe(groups, index) for index in range(count))
        self._stop = threading.Event()
        self._physics = threading.Lock()   # one step at a time: the thread's or a service's
        self._steps = 0
        self.server = simulation_server(self, paused)
        # Not self._clock: that is rclpy's own Node clock, which parameter sets use.
        self._imus, self._odoms, self._clock_message = [], [], Clock()
        for _ in range(count):
            imu, odom = Imu(), Odometry()
            imu.header.frame_id = self.child_frame_id
            odom.header.frame_id = self.frame_id
            odom.child_frame_id = self.child_frame_id
            self._imus.append(imu)
            self._odoms.append(odom)
        self._thread = threading.Thread(target=self._run, daemon=True, name='mujoco-physics')
        self._thread.start()
        fleet = f'{count} vehicles in one world, ' if count > 1 else ''
        pace = (f', {self.real_time_factor:g} x real time' if self.real_time_factor != 1.0
                else '')
        if paused:
            pace += ', paused until stepped (simulation_interfaces)'
        self.get_logger().info(f'MuJoCo {self.vehicle.path}: {fleet}physics and IMU at '
                               f'{self.rate:g} Hz, odometry at {self.rate / self.odom_every:g} '
                               f'Hz{pace}, commands on {topics}')

    def _subscribe(self, groups: Sequence[OutputGroup], vehicle: int) -> str:
        """Subscribe to every group's topics for a vehicle; return them described for the log."""
        names = self.vehicles[vehicle].actuator_names()
        prefix = self.namespaces[vehicle]
        if prefix and any(t.startswith('/') for group in groups for t in group_topics(group)):
            raise ValueError(f'preset: vehicles: {len(self.vehicles)} need relative command '
                             'topics, one set per namespace; an absolute one is shared')

        def ns(topic: str) -> str:
            """Return the vehicle's name of a command topic: absolute ones stay as given."""
            return topic if topic.startswith('/') else prefix + topic
        start, described = 0, []
        for group in groups:
            count = len(group.channels)
            if start + count > len(names):
                raise ValueError(f'preset: output group {group.name} drives more outputs than '
                                 f'the model\'s {len(names)} actuators ({", ".join(names)})')
            joints = ', '.join(names[start:start + count])
            if group.kind == OutputKind.FLOAT64:
                for index, topic in enumerate(group.topics):
                    self.create_subscription(
                        Float64, ns(topic),
                        lambda m, at=start + index: self._command(vehicle, at, 1, [m.data]),
                        COMMAND_QOS)
            elif group.kind == OutputKind.ACTUATORS:
                try:
                    from actuator_msgs.msg import Actuators
                except ImportError:
                    raise ValueError(f'preset: output group {group.name} takes actuator_msgs/'
                                     'Actuators, but actuator_msgs is not installed') from None
                field = group.field.value
                self.create_subscription(
                    Actuators, ns(group.topic),
                    lambda m, at=start, n=count, f=field: self._command(vehicle, at, n,
                                                                        getattr(m, f)),
                    COMMAND_QOS)
            else:
                self.create_subscription(
                    Float64MultiArray, ns(group.topic),
                    lambda m, at=start, n=count: self._command(vehicle, at, n, m.data),
                    COMMAND_QOS)
            topic = ', '.join(ns(t) for t in group_topics(group))
            described.append(f'{topic} ({group.kind.value}: {joints})')
            start += count
        if start != len(names):
            raise ValueError(f'preset: its output groups drive {start} outputs but the model '
                             f'has {len(names)} actuators ({", ".join(names)})')
        return '; '.join(described)

    def _command(self, vehicle: int, start: int, count: int, values: Sequence[float]) -> None:
        values = np.asarray(values, dtype=float)[:count]
        if len(values) < count or not np.all(np.isfinite(values)):
            self.get_logger().warning(
                f'commands for actuators {start}-{start + count - 1} ignored: expected {count} '
                f'finite values, got {values.tolist()}', throttle_duration_sec=5.0)
            return
        with self._lock:
            self._pending[vehicle][start:start + count] = values
            self._changed[vehicle] = True

    def _run(self) -> None:
        vehicle = self.vehicle
        wall_per_second = 1.0 / self.real_time_factor
        start = time.monotonic() - vehicle.time * wall_per_second
        while not self._stop.is_set():
            if self.server is not None and self.server.wait_while_paused(self._stop):
                start = time.monotonic() - vehicle.time * wall_per_second
                continue
            with self._physics:
                try:
                    self._step()
                except Exception:
                    # SIGTERM shuts the context down before destroy_node stops this thread.
                    if not self.context.ok():
                        return
                    raise
            ahead = start + vehicle.time * wall_per_second - time.monotonic()
            if ahead > 0.0:
                self._stop.wait(ahead)
            elif ahead < -MAX_LAG:
                start -= ahead

    def _step(self) -> None:
        """Take one physics step with the newest commands and publish its messages."""
        if any(self._changed):
            with self._lock:
                for index, changed in enumerate(self._changed):
                    if changed:
                        self.vehicles[index].set_commands(self._pending[index])
                        self._changed[index] = False
        advance_together(self.vehicles, 1.0 / self.rate)
        self._steps += 1
        self._publish(self._steps % self.odom_every == 0)

    def _publish(self, with_odometry: bool) -> None:
        clock = self._clock_message
        clock.clock.sec, clock.clock.nanosec = time_parts(self.vehicle.time)
        self.clock_publisher.publish(clock)
        for index in range(len(self.vehicles)):
            self._publish_vehicle(index, with_odometry)

    def _publish_vehicle(self, index: int, with_odometry: bool) -> None:
        state = self.vehicles[index].state()
        imu, clock = self._imus[index], self._clock_message
        imu.header.stamp = clock.clock
        x, y, z, w = state.orientation
        orientation = imu.orientation
        orientation.x, orientation.y, orientation.z, orientation.w = x, y, z, w
        rates, force = imu.angular_velocity, imu.linear_acceleration
        rates.x, rates.y, rates.z = state.body_rates
        force.x, force.y, force.z = state.specific_force
        self.imu_publishers[index].publish(imu)
        if with_odometry:
            odom = self._odoms[index]
            odom.header.stamp = clock.clock
            pose = odom.pose.pose
            pose.position.x, pose.position.y, pose.position.z = state.position
            q = pose.orientation
            q.x, q.y, q.z, q.w = x, y, z, w
            twist = odom.twist.twist
            twist.linear.x, twist.linear.y, twist.linear.z = state.body_velocity
            twist.angular.x, twist.angular.y, twist.angular.z = state.body_rates
            self.odom_publishers[index].publish(odom)
            air = self._air[index]
            if air is not None:
                airspeed_publisher, wind_publisher, airspeed, wind = air
                airspeed.data = float(state.airspeed)
                airspeed_publisher.publish(airspeed)
                wind.header.stamp = clock.clock
                wind.vector.x, wind.vector.y, wind.vector.z = state.wind
                wind_publisher.publish(wind)

    def destroy_node(self) -> None:
        """Stop the physics thread before the node goes."""
        stop = getattr(self, '_stop', None)
        if stop is not None:
            stop.set()
            if self.server is not None:
                self.server.wake()
            self._thread.join(2.0)
        super().destroy_node()


def simulation_server(node: MujocoSim, paused: bool) -> Optional[Any]:
    """
    Offer simulation_interfaces (a bridge may then step the simulator), if it is installed.

    Without it the simulator runs free; paused:=true then has no one to step it: refused.
    """
    try:
        from ardupilot_json_bridge.ros.simulation_server import SimulationServer
    except ImportError:
        if paused:
            raise ValueError('paused: nothing could step the simulator: simulation_interfaces '
                             'is not installed (apt install '
                             'ros-$ROS_DISTRO-simulation-interfaces)')
        return None
    return SimulationServer(node, node._step, node._physics, paused)


def command_groups(preset: Optional[str], command_type: str,
                   namespace: str = '') -> List[OutputGroup]:
    """
    Return the output groups of a bridge preset, whose topics carry the simulator's commands.

    The preset's sections apply as to a bridge in namespace. command_type, when set, makes
    every group's topic that message type instead.
    """
    if preset is None:
        raise ValueError("preset: the vehicle's shipped preset was not found; name one")
    try:
        groups = list(config_from_parameters(
            load_parameters_file(preset, NODE_NAME, namespace)).outputs)
    except (ConfigError, OSError) as error:
        raise ValueError(f'preset {preset}: {error}') from None
    if command_type:
        try:
            kind = OutputKind(command_type)
        except ValueError:
            raise ValueError(f'command_type: {command_type!r} is not float64_multi_array or '
                             'actuators') from None
        groups = [replace(group, kind=kind) for group in groups]
    return groups


def main(args: Optional[List[str]] = None) -> int:
    fatal = (VehicleError, ValueError, ParameterException, InvalidTopicNameException)
    return run_node(MujocoSim, 'mujoco_sim', fatal, args)


if __name__ == '__main__':
    sys.exit(main())
