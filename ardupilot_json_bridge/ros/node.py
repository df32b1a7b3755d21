"""
The json_sitl_bridge node: simulator topics in, ArduPilot SITL link, actuator commands out.

Written against what Humble and Jazzy both offer. The node subscribes and publishes; the UDP
link and the state run in a child process of their own (link/link_process.py), out of the
executor's way and of its GIL: nothing on the data path waits for a ROS timer or callback, and
ROS timers stall while simulated time stands still. Messages of the IMU and odometry go down
raw, decoded in the child; the child sends back PWM for the commands, every frame's serialized
servo_pwm, log lines and statistics for /diagnostics.
"""

import array
from dataclasses import replace
from functools import partial
import importlib
import logging
import math
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
import numpy as np
from rcl_interfaces.msg import (
    FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult)
import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import NameValidationException, ParameterException
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import (
    DurabilityPolicy, HistoryPolicy, qos_profile_sensor_data, QoSProfile, ReliabilityPolicy)
from rclpy.qos_overriding_options import QoSOverridingOptions
from rclpy.signals import SignalHandlerOptions
from rclpy.task import Future
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, Float64MultiArray, Header, MultiArrayLayout

from ardupilot_json_bridge.config import (
    BridgeConfig, config_from_parameters, ConfigError, NODE_NAME, one_line, OUTPUT_SETTINGS,
    PARAMETERS, ParameterSpec)
from ardupilot_json_bridge.core.pwm import ActuatorMapper, OutputKind
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.wakeup import Wakeup
from ardupilot_json_bridge.link.link_process import LinkProcess
from ardupilot_json_bridge.link.udp_port import bind_udp, LinkError
from ardupilot_json_bridge.messages.commands import group_messages, group_topics, MessageClasses
from ardupilot_json_bridge.messages.routes import deliver, IMU_TYPE, input_routes, InputRoute, \
    SERIALIZED_DECODERS
from ardupilot_json_bridge.messages.servo_pwm import SERVO_FRAME_ID
from ardupilot_json_bridge.ros.diagnostics import BridgeMonitor, Level
from ardupilot_json_bridge.ros.sim_control import start_sim_control

# Simulator sensors: best effort receives from reliable (ros_gz_bridge) and best-effort
# publishers alike; only the newest sample matters.
SENSOR_QOS = qos_profile_sensor_data
# Actuator commands: a best-effort publisher reaches no reliable subscriber (ros_gz_bridge,
# ros2_control), so commands are reliable.
COMMAND_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                         reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.VOLATILE)
# servo_pwm, for recording: every frame, handed over in batches, so a deeper queue than the
# commands' keeps a burst whole for a subscriber that takes it a moment later.
RECORDING_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=200,
                           reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.VOLATILE)
# What diagnostic_updater uses for /diagnostics.
DIAGNOSTICS_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                             reliability=ReliabilityPolicy.RELIABLE)
DIAGNOSTICS_PERIOD = 1.0
# Settings the link and state can take while running; the rest are read-only.
LIVE_SETTINGS = ('fresh_timeout', 'peer_timeout', 'max_odometry_lag', 'max_optional_age',
                 'max_backlog', 'horizon')
# How long a stopping executor may take to return from its last callback (s).
SPIN_STOP_TIMEOUT = 5.0
# Every this many IMU messages, the node's clock on receipt goes along for the clock check.
CLOCK_SAMPLE_EVERY = 50
LEVELS = {Level.OK: 'OK', Level.WARN: 'WARN', Level.ERROR: 'ERROR', Level.STALE: 'STALE'}


def message_class(msgtype: str) -> Any:
    """Return the rclpy class of 'package/msg/Name'."""
    package, _, name = msgtype.split('/')
    return getattr(importlib.import_module(f'{package}.msg'), name)


def parameter_descriptor(spec: ParameterSpec) -> ParameterDescriptor:
    """Return a ROS parameter descriptor from a ParameterSpec (numbers take ints or floats)."""
    descriptor = ParameterDescriptor(description=spec.description, read_only=spec.read_only)
    if spec.choices:
        descriptor.additional_constraints = 'one of: ' + ', '.join(spec.choices)
    default = spec.default
    if isinstance(default, bool) or isinstance(default, str):
        return descriptor
    if isinstance(default, int) and spec.minimum is not None:
        descriptor.integer_range = [IntegerRange(from_value=int(spec.minimum),
                                                 to_value=int(spec.maximum), step=0)]
    elif isinstance(default, (float, list)):
        descriptor.dynamic_typing = True
        if isinstance(default, float) and spec.minimum is not None:
            descriptor.floating_point_range = [FloatingPointRange(
                from_value=float(spec.minimum), to_value=float(spec.maximum), step=0.0)]
    return descriptor


def rclpy_message_classes() -> MessageClasses:
    """Return the classes commands are built from here; Actuators only if actuator_msgs exists."""
    try:
        from actuator_msgs.msg import Actuators
    except ImportError:
        Actuators = None
    return MessageClasses(
        time=Time, header=Header, float64=Float64, float64_multi_array=Float64MultiArray,
        multi_array_layout=MultiArrayLayout,
        actuators=Actuators, float_array=lambda values: np.asarray(values, dtype=float))


class RosLogHandler(logging.Handler):
    """Sends the core's Python log records to a node's ROS logger."""

    def __init__(self, node: Node) -> None:
        super().__init__()
        self._logger = node.get_logger()

    def emit(self, record: logging.LogRecord) -> None:
        message = self.format(record)
        if record.levelno >= logging.ERROR:
            self._logger.error(message)
        elif record.levelno >= logging.WARNING:
            self._logger.warning(message)
        elif record.levelno >= logging.INFO:
            self._logger.info(message)
        else:
            self._logger.debug(message)


class JsonSitlBridge(Node):
    """Serves one ArduPilot SITL instance from the simulator's topics."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        try:
            self._start()
        except BaseException:
            # A bad parameter or a port in use: leave no half-built node behind.
            self.destroy_node()
            raise

    def _start(self) -> None:
        self._log_handler = RosLogHandler(self)
        self.core_logger = logging.getLogger(f'ardupilot_json_bridge.{id(self)}')
        self.core_logger.addHandler(self._log_handler)
        self.core_logger.setLevel(logging.INFO)
        self.core_logger.propagate = False
        self.warnings = RateLimitedLog(self.core_logger)
        parameters = self._declare_parameters()
        self.config = config_from_parameters(parameters)
        self.classes = rclpy_message_classes()
        link = self.config.link
        self._udp = bind_udp(link.bind_address, link.listen_port, link.instance)
        # The publishers exist before the link process that feeds them.
        self.groups = self._usable_groups(self.config)
        self.mapper = ActuatorMapper(self.groups)
        command_types = {OutputKind.ACTUATORS: self.classes.actuators,
                         OutputKind.FLOAT64_MULTI_ARRAY: Float64MultiArray,
                         OutputKind.FLOAT64: Float64}
        self.command_publishers = {
            topic: self.create_publisher(command_types[group.kind], topic, COMMAND_QOS)
            for group in self.groups for topic in group_topics(group)}
        if not self.groups:
            self.get_logger().warning(
                'no output groups: SITL is answered but no actuator command is published; '
                'give a params_file (a preset in config/) or output_groups')
        self.pwm_publisher = (self.create_publisher(JointState, self.config.raw_pwm_topic,
                                                    RECORDING_QOS)
                              if self.config.raw_pwm_topic else None)
        # The link process ending is fatal: told in its reader thread, raised in the executor's.
        self._link_end = self.create_guard_condition(self._stop_for_link_end)
        # The link runs in a process of its own, out of the executor's way; this one converts
        # messages and forwards the samples, and publishes what comes back.
        recorded = None if self.pwm_publisher is None else self._publish_recorded
        # Lock-step through ROS (sim_control): the simulator is stepped to each SITL frame.
        self.sim_control = start_sim_control(self, self.config)
        self.link = LinkProcess(parameters, self._udp, self._on_pwm, self.core_logger,
                                on_recorded=recorded,
                                on_ended=lambda _: self._link_end.trigger(),
                                on_wait=(None if self.sim_control is None
                                         else self.sim_control.on_wait))
        self.routes = input_routes(self.config, self.link)
        self._imu_count = 0
        for index, route in enumerate(self.routes):
            if route.msgtype == IMU_TYPE:
                callback = partial(self._imu_received, index)
            elif route.msgtype in SERIALIZED_DECODERS:
                # Taken raw and decoded in the link process: see cdr.py.
                callback = partial(self.link.push_serialized, index)
            else:
                callback = partial(self._deliver, route)
            self.create_subscription(
                message_class(route.msgtype), route.topic, callback, SENSOR_QOS,
                qos_overriding_options=QoSOverridingOptions.with_default_policies(),
                raw=route.msgtype in SERIALIZED_DECODERS)
        prefix = self.get_fully_qualified_name().lstrip('/')
        self.monitor = BridgeMonitor(
            self.config.link, prefix, {r.name: self.resolve_topic_name(r.topic)
                                       for r in self.routes},
            [r.name for r in self.routes if r.mandatory])
        self.diagnostics_publisher = self.create_publisher(DiagnosticArray, '/diagnostics',
                                                           DIAGNOSTICS_QOS)
        self.diagnostics_timer = self.create_timer(
            DIAGNOSTICS_PERIOD, self.publish_diagnostics,
            clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.add_on_set_parameters_callback(self._on_set_parameters)

    def _declare_parameters(self) -> Dict[str, Any]:
        values: Dict[str, Any] = {}
        for spec in PARAMETERS:
            values[spec.name] = self.declare_parameter(
                spec.name, spec.default, parameter_descriptor(spec)).value
        dynamic = ParameterDescriptor(dynamic_typing=True, read_only=True)
        groups = self.declare_parameter(
            'output_groups', None, ParameterDescriptor(
                dynamic_typing=True, read_only=True,
                description='Names of the actuator output groups; each is configured by '
                            'outputs.<name>.<setting>')).value or []
        values['output_groups'] = list(groups)
        for group in values['output_groups']:
            for setting in OUTPUT_SETTINGS:
                name = f'outputs.{group}.{setting}'
                value = self.declare_parameter(name, None, dynamic).value
                if value is not None:
                    values[name] = value
        # rclpy silently drops overrides no one declares; hand them to the validation too, so
        # a misspelled name is refused here as on the command line.
        for name, override in getattr(self, '_parameter_overrides', {}).items():
            if not self.has_parameter(name):
                values[name] = override.value
        return {k: list(v) if isinstance(v, array.array) else v for k, v in values.items()}

    def _usable_groups(self, config: BridgeConfig) -> List[Any]:
        groups = []
        for group in config.outputs:
            if group.kind is OutputKind.ACTUATORS and self.classes.actuators is None:
                self.get_logger().error(
                    f'output group {group.name} publishes actuator_msgs/Actuators, but '
                    'actuator_msgs is not installed (apt install ros-$ROS_DISTRO-actuator-msgs)'
                    ': the group is refused, the rest of the bridge runs')
                continue
            groups.append(group)
        return groups

    def _imu_received(self, index: int, data: bytes) -> None:
        """Forward a raw IMU message; every CLOCK_SAMPLE_EVERY-th with this node's clock."""
        self._imu_count += 1
        if self._imu_count % CLOCK_SAMPLE_EVERY == 0:
            now = self.get_clock().now().nanoseconds
            if now:  # zero: on simulated time, before the first /clock
                self.link.push_clock(now * 1e-9)
        self.link.push_serialized(index, data)

    def _deliver(self, route: InputRoute, message: Any) -> None:
        deliver(route, message, self._now(), self.link, self.warnings)

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_pwm(self, pwm: List[int], frame_rate: int, physics_time: float) -> None:
        """
        Publish the commands: the link process forwards PWM that changed, or held 20 ms.

        Stamped with the physics time of the state SITL computed them from; before the first
        reply, which has none, with this node's clock.
        """
        try:
            stamp = physics_time if math.isfinite(physics_time) else self._now()
            values = self.mapper.apply(pwm)
            for group in self.groups:
                for topic, message in group_messages(self.classes, group, values[group.name],
                                                     stamp, SERVO_FRAME_ID):
                    self.command_publishers[topic].publish(message)
        except Exception:
            self._unless_shut_down()

    def _publish_recorded(self, data: bytes) -> None:
        """Publish one frame's serialized PWM on the raw PWM topic."""
        try:
            self.pwm_publisher.publish(data)
        except Exception:
            self._unless_shut_down()

    def _unless_shut_down(self) -> None:
        """Re-raise a publishing error, unless Ctrl-C shut the context down under it."""
        if self.context.ok():
            raise

    def _stop_for_link_end(self) -> None:
        """Say on /diagnostics that the link process ended, then end the node (exit 1)."""
        self.publish_diagnostics()
        raise LinkError(f'{self.link.ended}; the bridge stops')

    def publish_diagnostics(self) -> None:
        """
        Publish the link's and the inputs' statuses on /diagnostics.

        Stamped with the node's clock; on simulated time before the first /clock, which reads
        0, with the wall clock.
        """
        report = DiagnosticArray()
        now = self.get_clock().now()
        if not now.nanoseconds:
            now = Clock(clock_type=ClockType.SYSTEM_TIME).now()
        report.header.stamp = now.to_msg()
        link = self.link
        for status in self.monitor.statuses(link.stats, link.meters, time.monotonic(),
                                            link.conventions, link.ended):
            report.status.append(DiagnosticStatus(
                level=getattr(DiagnosticStatus, LEVELS[status.level]), name=status.name,
                message=status.message, hardware_id=f'sitl_instance_{self.config.link.instance}',
                values=[KeyValue(key=k, value=v) for k, v in status.values.items()]))
        self.diagnostics_publisher.publish(report)

    def _on_set_parameters(self, parameters: List[Any]) -> SetParametersResult:
        changes = {p.name: p.value for p in parameters if p.name in LIVE_SETTINGS}
        if not changes:
            return SetParametersResult(successful=True)
        current = {name: self.get_parameter(name).value for name in LIVE_SETTINGS}
        try:
            config = config_from_parameters({**current, **changes})
        except ConfigError as error:
            return SetParametersResult(successful=False, reason=str(error))
        self.config = replace(
            self.config,
            link=replace(self.config.link, fresh_timeout=config.link.fresh_timeout,
                         peer_timeout=config.link.peer_timeout),
            state=replace(self.config.state, max_odometry_lag=config.state.max_odometry_lag,
                          max_optional_age=config.state.max_optional_age,
                          max_backlog=config.state.max_backlog, horizon=config.state.horizon))
        self.link.update_settings(self.config.link, self.config.state)
        return SetParametersResult(successful=True)

    def destroy_node(self) -> None:
        """
        Stop the link process (releasing its port) before the node goes.

        Safe on a node whose construction failed: Kilted's rclpy.shutdown() destroys every
        node of the context, half-built ones included.
        """
        stepper = getattr(self, 'sim_control', None)
        if stepper is not None:
            stepper.close()
        link = getattr(self, 'link', None)
        if link is not None:
            link.close()
        udp = getattr(self, '_udp', None)
        if udp is not None:
            udp.close()
        handler = getattr(self, '_log_handler', None)
        if handler is not None:
            self.core_logger.removeHandler(handler)
        super().destroy_node()


def run_node(factory: Callable[[], Node], name: str, fatal: Tuple[type, ...],
             args: Optional[List[str]] = None) -> int:
    """
    Init rclpy, spin the node factory makes, and clean up: the main of every node here.

    An exception in fatal (a bad parameter, a port in use) is one FATAL line and exit 1;
    Ctrl-C and SIGTERM are a clean exit 0. The signals are handled here, not by rclpy: under
    load, rclpy's own handler sometimes let a signal pass while the node was being built, and
    the node then spun on, deaf to it. Here a signal at any moment after init stops the node.
    The executor spins in a thread; this one waits for a signal or for the executor to end.
    """
    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    except RuntimeError as error:
        # rcl refusing its arguments (RCLError: a --params-file that is missing or not YAML,
        # a bad remapping) is the user's input: one line, as for a bad parameter.
        rclpy.logging.get_logger(name).fatal(one_line(error))
        return 1
    stop = Wakeup()
    node: Optional[Node] = None
    failure: List[BaseException] = []
    try:
        node = factory()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        # executor=: Humble's executor returns only once it has run the future's callback.
        stopped = Future(executor=executor)
        spinner = threading.Thread(target=spin_until_shutdown, name='executor', daemon=True,
                                   args=(executor, stopped, stop, failure))
        spinner.start()
        stop.wait()
        stop.ignore_signals()
        stopped.set_result(None)   # wakes the executor, which returns with rclpy still up
        spinner.join(SPIN_STOP_TIMEOUT / 2)
        if spinner.is_alive():
            rclpy.try_shutdown()   # a callback that does not return: stop it the hard way
            spinner.join(SPIN_STOP_TIMEOUT / 2)
        if not spinner.is_alive():
            # Now, not in Executor.__del__ at exit, which may come after rclpy is gone.
            executor.shutdown(timeout_sec=0)
        if failure:
            raise failure[0]
    except fatal as error:
        rclpy.logging.get_logger(name).fatal(one_line(error))
        return 1
    finally:
        stop.ignore_signals()
        stop.close()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


def spin_until_shutdown(executor: Executor, stopped: Future, stop: Wakeup,
                        failure: List[BaseException]) -> None:
    """
    Spin until stopped or rclpy shuts down; keep a callback's exception, and end the node.

    A loop of its own over spin_once, not executor.spin_until_future_complete: Jazzy's (rclpy
    7.1) adds a done-callback to the future at every wake-up, so a node spun by it held one
    more lambda per callback, for good: 1 GB after an hour of a 1 kHz IMU. The one callback
    added here wakes the executor when the future is done.
    """
    stopped.add_done_callback(lambda _: executor.wake())
    try:
        while executor.context.ok() and not stopped.done():
            executor.spin_once()
    except ExternalShutdownException:
        pass
    except Exception as error:
        # A shutdown under a waiting executor raises (RCLError on Jazzy): not a failure.
        if rclpy.ok():
            failure.append(error)
    finally:
        stop.set()


def main(args: Optional[List[str]] = None) -> int:
    return run_node(JsonSitlBridge, NODE_NAME, (ConfigError, LinkError, ParameterException,
                                                NameValidationException), args)


if __name__ == '__main__':
    sys.exit(main())
