"""
Lock-step through ROS: the bridge steps a paused simulator to each instant SITL waits for.

With sim_control set, the link process tells the node the source instant each SITL frame is
about to wait for (LinkProcess's on_wait); a thread here asks the simulator for the steps
that reach it (core/step_plan.py), and the frame is answered once the sensor messages of that
instant arrive. SITL and the simulator then wait for each other whatever else the machine
does, and run faster than real time where it allows. The commands a frame brings are
published before its wait is told, so the simulator normally applies them from the next step
on; a command message that arrives after the step request is applied a step later.

Two ways to step:
- simulation_interfaces (the ROS standard: Isaac Sim, Gazebo's ros_gz_sim from Jetty, O3DE,
  mujoco-sim here): GetSimulatorFeatures at start, pausing through SetSimulationState where
  it is playing, then StepSimulation, whose call returns once the steps are done (the
  SimulateSteps action where the service takes only single steps).
- gz_control_world (Gazebo Harmonic's ros_gz 1.0, before it had simulation_interfaces): the
  world's ControlWorld service (ros_gz_interfaces) bridged by ros_gz_bridge, with pause and
  multi_step. Gazebo answers before it steps, so each request waits for /clock to get there.
  ros_gz_bridge offers the service as soon as it starts, Gazebo or not (a request then waits
  for Gazebo); Gazebo publishes /clock even while paused, so its first /clock says it is up.

The step size is the world's own: measured from /clock over the first two single steps.
"""

from functools import partial
import importlib
import math
import threading
import time
from typing import Any, Callable, List, Optional

from rclpy.action import ActionClient
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from rosgraph_msgs.msg import Clock

from ardupilot_json_bridge.config import (
    BridgeConfig, GZ_CONTROL_WORLD, SIM_CONTROL_NONE, SIMULATION_INTERFACES)
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.step_plan import StepPlan

# Simulator time stepped through before serving (s), so that every topic, odometry at a
# lower rate than the IMU's (100 Hz or more) included, has published before SITL's first frame.
# Less than max_backlog: SITL's first frame may come while these messages are still on their
# way, and start the grid at one of the first. (A slower topic is waited for: a frame left
# unanswered steps the simulator once more each time SITL sends it again.)
WARM_UP = 0.01
# How long a call or a clock may take before the bridge says it is still waiting (s).
PATIENCE = 5.0
# A query (features, state: not a step) unanswered this long is asked again (s), in all this many
# times: an answer can be lost while a service's connection is still being made.
QUERY_PATIENCE, QUERY_ATTEMPTS = 2.0, 5
# How often a call that is not answered (the simulator stopped first) checks for close() (s).
STOP_CHECK = 0.1
# simulation_interfaces/msg/SimulatorFeatures and SimulationState values used here.
STEP_SINGLE, STEP_MULTIPLE, STEP_ACTION = 31, 32, 33
STATE_GETTING, STATE_SETTING, STATE_PAUSE = 24, 25, 26
STATE_PLAYING, STATE_PAUSED = 1, 2
RESULT_OK = 1
# Once the simulator's sensor topics have publishers, how long their connections may take to
# be made (s): a message published before is lost, and the simulator steps only when asked.
CONNECTING = 1.0
INSTALL = {SIMULATION_INTERFACES: 'simulation_interfaces (apt install '
                                  'ros-$ROS_DISTRO-simulation-interfaces)',
           GZ_CONTROL_WORLD: 'ros_gz_interfaces (apt install ros-$ROS_DISTRO-ros-gz-interfaces)'}


class SimControlError(RuntimeError):
    """The simulator cannot be stepped; the message says why and what to do."""


def interface(mode: str, name: str) -> Any:
    """Return an interface class of the mode's package ('srv.StepSimulation'); one line if not."""
    package = SIMULATION_INTERFACES if mode == SIMULATION_INTERFACES else 'ros_gz_interfaces'
    kind, _, type_name = name.partition('.')
    try:
        return getattr(importlib.import_module(f'{package}.{kind}'), type_name)
    except ImportError:
        raise SimControlError(f'sim_control {mode}: {INSTALL[mode]} is not installed; the '
                              'bridge follows the simulator instead (sim_control none)') from None


def service_name(namespace: str, name: str) -> str:
    """Return a service's name in the simulator's namespace (empty: the node's own)."""
    return f'{namespace.rstrip("/")}/{name}' if namespace.strip('/') else name


class Waiter:
    """Blocks the stepping thread on a future the executor completes; stop ends the wait."""

    def __init__(self, stop: threading.Event, log: RateLimitedLog) -> None:
        self._stop = stop
        self._log = log

    def result(self, future: Any, what: str,
               ask_again: Optional[Callable[[], Any]] = None) -> Any:
        """
        Return the future's result once done; None if stopping first (within STOP_CHECK).

        ask_again: for a query that may be sent again (its answer lost, as while a service's
        connection is still being made), sends it anew: each QUERY_PATIENCE unanswered, up to
        QUERY_ATTEMPTS requests in all, then SimControlError. Without it (a step, which must
        not be taken twice) the wait goes on, said every PATIENCE.
        """
        patience = QUERY_PATIENCE if ask_again is not None else math.inf
        done = threading.Event()
        futures = [future]
        future.add_done_callback(lambda _: done.set())
        for attempt in range(1, QUERY_ATTEMPTS + 1):
            if self._wait(done, what, patience) is not None:
                if self._stop.is_set():
                    return None
                return next(f for f in futures if f.done()).result()
            if attempt < QUERY_ATTEMPTS:
                self._log.warning('again', f'sim_control: {what} has not answered in '
                                           f'{QUERY_PATIENCE:g} s; asking again')
                futures.append(ask_again())
                futures[-1].add_done_callback(lambda _: done.set())
        raise SimControlError(f'sim_control: {what} did not answer {QUERY_ATTEMPTS} requests '
                              f'in {QUERY_ATTEMPTS * QUERY_PATIENCE:g} s: is the simulator up '
                              'and serving (spinning) its services?')

    def _wait(self, done: threading.Event, what: str, patience: float) -> Optional[bool]:
        """Return True once done or stopping, None after patience seconds unanswered."""
        started = said = time.monotonic()
        while not done.wait(STOP_CHECK):
            if self._stop.is_set():
                return True
            now = time.monotonic()
            if now - started >= patience:
                return None
            if now - said >= PATIENCE:
                said = now
                self._log.warning('slow', f'sim_control: {what} has not answered in '
                                          f'{now - started:.0f} s; still waiting (is the '
                                          'simulator up?)')
        return True


class SimulationInterfaces:
    """Steps a simulator through the simulation_interfaces standard."""

    returns_after_stepping = True
    clock_says_up = False

    def __init__(self, node: Node, namespace: str, waiter: Waiter) -> None:
        self._node = node
        self._waiter = waiter
        self._features_type = interface(SIMULATION_INTERFACES, 'srv.GetSimulatorFeatures')
        self._step_type = interface(SIMULATION_INTERFACES, 'srv.StepSimulation')
        self._get_state_type = interface(SIMULATION_INTERFACES, 'srv.GetSimulationState')
        self._set_state_type = interface(SIMULATION_INTERFACES, 'srv.SetSimulationState')
        self._action_type = interface(SIMULATION_INTERFACES, 'action.SimulateSteps')
        name = partial(service_name, namespace)
        self._features = node.create_client(self._features_type, name('get_simulator_features'))
        self._step = node.create_client(self._step_type, name('step_simulation'))
        self._get_state = node.create_client(self._get_state_type, name('get_simulation_state'))
        self._set_state = node.create_client(self._set_state_type, name('set_simulation_state'))
        self._action = ActionClient(node, self._action_type, name('simulate_steps'))
        self.where = node.resolve_service_name(name('step_simulation'))
        self._multiple = 'service'

    def _call(self, client: Any, request: Any, what: str) -> Any:
        """Return the answer to a query, asked again where it goes unanswered."""
        return self._waiter.result(client.call_async(request), what,
                                   ask_again=partial(client.call_async, request))

    def check(self) -> str:
        """Check the simulator can step and pause it if it plays; return how it steps."""
        features_name = self._features.srv_name
        response = self._call(self._features, self._features_type.Request(), features_name)
        if response is None:
            return ''
        features = set(response.features.features)
        if STEP_SINGLE not in features and STEP_MULTIPLE not in features:
            raise SimControlError(
                f'sim_control simulation_interfaces: the simulator at {features_name} cannot '
                f'step (features {sorted(features)} name neither STEP_SIMULATION_SINGLE nor '
                'STEP_SIMULATION_MULTIPLE); run it free with sim_control none')
        if STEP_MULTIPLE in features:
            self._multiple = 'action' if (STEP_ACTION in features and STEP_SINGLE
                                          not in features) else 'service'
        else:
            self._multiple = 'single'
        if STATE_GETTING in features:
            self._pause_if_playing(features)
        return {'service': 'StepSimulation', 'action': 'the SimulateSteps action',
                'single': 'single steps of StepSimulation'}[self._multiple]

    def _pause_if_playing(self, features: set) -> None:
        state = self._call(self._get_state, self._get_state_type.Request(),
                           self._get_state.srv_name)
        if state is None or state.state.state != STATE_PLAYING:
            return
        if STATE_SETTING not in features or STATE_PAUSE not in features:
            raise SimControlError(
                f'sim_control simulation_interfaces: the simulator at {self.where} is playing '
                'and cannot be paused through SetSimulationState: start it paused')
        request = self._set_state_type.Request()
        request.state.state = STATE_PAUSED
        answer = self._call(self._set_state, request, self._set_state.srv_name)
        if answer is not None and answer.result.result not in (
                RESULT_OK, answer.ALREADY_IN_TARGET_STATE):
            raise SimControlError(f'sim_control simulation_interfaces: pausing the simulator '
                                  f'failed: {answer.result.error_message}')

    def step(self, steps: int) -> None:
        """Step steps times; return once done (SimControlError if refused)."""
        if self._multiple == 'single':
            for _ in range(steps):
                self._step_service(1)
        elif self._multiple == 'action' and steps > 1:
            self._step_action(steps)
        else:
            self._step_service(steps)

    def _step_service(self, steps: int) -> None:
        response = self._waiter.result(
            self._step.call_async(self._step_type.Request(steps=steps)), self.where)
        if response is not None and response.result.result != RESULT_OK:
            raise SimControlError(f'StepSimulation({steps}) at {self.where} refused: '
                                  f'{response.result.error_message or response.result.result}')

    def _step_action(self, steps: int) -> None:
        handle = self._waiter.result(self._action.send_goal_async(
            self._action_type.Goal(steps=steps)), 'the SimulateSteps action')
        if handle is None:
            return
        if not handle.accepted:
            raise SimControlError(f'SimulateSteps({steps}) was not accepted')
        outcome = self._waiter.result(handle.get_result_async(), 'the SimulateSteps action')
        if outcome is not None and outcome.result.result.result != RESULT_OK:
            raise SimControlError(f'SimulateSteps({steps}) failed: '
                                  f'{outcome.result.result.error_message}')

    def wait_until_ready(self, stop: threading.Event) -> bool:
        """Wait for the step service; False if stopped first."""
        return wait_for_service(self._features, stop) and wait_for_service(self._step, stop)


class GzControlWorld:
    """Steps Gazebo through its world's ControlWorld service, bridged by ros_gz_bridge."""

    returns_after_stepping = False
    clock_says_up = True

    def __init__(self, node: Node, service: str, waiter: Waiter) -> None:
        self._type = interface(GZ_CONTROL_WORLD, 'srv.ControlWorld')
        self._waiter = waiter
        self._client = node.create_client(self._type, service or '/world/default/control')
        self.where = node.resolve_service_name(self._client.srv_name)

    def _control(self, steps: int) -> None:
        request = self._type.Request()
        request.world_control.pause = True
        request.world_control.multi_step = steps
        # Pausing may be asked again; a step may not (it would be taken twice).
        again = None if steps else partial(self._client.call_async, request)
        response = self._waiter.result(self._client.call_async(request), self.where, again)
        if response is not None and not response.success:
            raise SimControlError(f'ControlWorld at {self.where} refused to '
                                  f'{"step " + str(steps) if steps else "pause"}')

    def check(self) -> str:
        """Pause the world; return how it steps."""
        self._control(0)
        return 'ControlWorld multi_step'

    def step(self, steps: int) -> None:
        """Ask for steps more steps (Gazebo answers before taking them)."""
        self._control(steps)

    def wait_until_ready(self, stop: threading.Event) -> bool:
        return wait_for_service(self._client, stop)


def wait_for_service(client: Any, stop: threading.Event) -> bool:
    """Wait for a service to appear, until stop; False if stopped."""
    while not stop.is_set():
        if client.wait_for_service(timeout_sec=0.5):
            return True
    return False


class SimStepper:
    """Steps the simulator to each instant the link waits for, in a thread of its own."""

    def __init__(self, node: Node, config: BridgeConfig) -> None:
        """Create the clients (SimControlError, one line, if the mode's package is missing)."""
        self._node = node
        self._log = RateLimitedLog(node.core_logger)
        self._stop = threading.Event()
        waiter = Waiter(self._stop, self._log)
        backend = SimulationInterfaces if config.sim_control == SIMULATION_INTERFACES \
            else GzControlWorld
        self.backend = backend(node, config.sim_control_service, waiter)
        self._condition = threading.Condition()
        self._wanted: List[Optional[float]] = []
        self._clock: Optional[float] = None
        self.plan: Optional[StepPlan] = None
        self.round_trips = 0
        self.round_trip_seconds = 0.0
        node.create_subscription(Clock, '/clock', self._on_clock, qos_profile_sensor_data)
        self._thread = threading.Thread(target=self._run, daemon=True, name='sim-control')
        self._thread.start()

    def _on_clock(self, message: Clock) -> None:
        with self._condition:
            self._clock = message.clock.sec + message.clock.nanosec * 1e-9
            self._condition.notify_all()

    def on_wait(self, instant: Optional[float]) -> None:
        """Take the instant a SITL frame waits for (the link process's on_wait)."""
        with self._condition:
            self._wanted = [instant]
            self._condition.notify_all()

    def close(self) -> None:
        """Stop the stepping thread, and say what the step requests cost."""
        self._stop.set()
        with self._condition:
            self._condition.notify_all()
        self._thread.join(PATIENCE + 1.0)
        self._node.core_logger.info(f'sim_control: {self.summary()}')

    def summary(self) -> str:
        """Say how many step requests went and what one cost, from request to answer."""
        if not self.round_trips:
            return 'no step requested'
        plan = self.plan
        reached = '' if plan is None else (f' ({plan.steps} steps, to {plan.reached:.3f} s '
                                           'of simulator time)')
        return (f'{self.round_trips} step requests{reached}, each '
                f'{self.round_trip_seconds / self.round_trips * 1e3:.3f} ms on average from '
                'request to answer')

    def _run(self) -> None:
        logger = self._node.core_logger
        try:
            backend = self.backend
            logger.info(f'sim_control: waiting for the simulator at {backend.where}')
            if not backend.wait_until_ready(self._stop) or not self._sensors_published():
                return
            if backend.clock_says_up and self._clock_reaching(
                    0.0, 'the simulator to start (its service is there before it is)') is None:
                return
            how = backend.check()
            if self._stop.is_set():
                return
            self.plan = self._measure_step()
            if self.plan is None:
                return
            self._step(self.plan, self.plan.steps_to(self.plan.start + WARM_UP))
            logger.info(f'sim_control: lock-step through ROS with the simulator at '
                        f'{backend.where} ({how}, {self.plan.step * 1e3:g} ms steps from '
                        f'{self.plan.start:.3f} s): SITL and the simulator wait for each other')
            self._serve(self.plan)
        except SimControlError as error:
            logger.error(str(error))
        except Exception as error:
            if self._node.context.ok() and not self._stop.is_set():
                logger.error(f'sim_control: stepping the simulator failed: {error!r}; SITL '
                             'waits for physics that no longer comes')

    def _sensors_published(self) -> bool:
        """Wait for publishers of the mandatory sensor topics, and connect; False if stopped."""
        inputs = self._node.config.inputs
        topics = [self._node.resolve_topic_name(topic) for topic in (
            inputs.odom_topic, '' if self._node.config.state.odometry_only else inputs.imu_topic)
            if topic]
        said = False
        while not all(self._node.count_publishers(topic) for topic in topics):
            if not said:
                self._node.core_logger.info(f'sim_control: waiting for publishers of '
                                            f'{", ".join(topics)}')
                said = True
            if self._stop.wait(0.2):
                return False
        return not self._stop.wait(CONNECTING)

    def _serve(self, plan: StepPlan) -> None:
        """
        Step to each instant asked for, until stopped.

        The same instant asked for again is a frame that went unanswered (SITL sends it again):
        a message the state needs may still be to come, so the simulator steps once more.
        """
        last: Optional[float] = None
        while True:
            with self._condition:
                while not self._wanted and not self._stop.is_set():
                    self._condition.wait()
                if self._stop.is_set():
                    return
                instant = self._wanted.pop()
            steps = plan.steps_to(instant)
            if not steps and instant is not None and instant == last:
                steps = 1
            last = instant
            if steps:
                self._step(plan, steps)

    def _step(self, plan: StepPlan, steps: int) -> None:
        started = time.perf_counter()
        try:
            self.backend.step(steps)
        except SimControlError as error:
            self._log.error('refused', f'sim_control: {error}')
            return
        plan.stepped(steps)
        if not self.backend.returns_after_stepping:
            self._clock_reaching(plan.reached, 'the steps asked for')
        self.round_trips += 1
        self.round_trip_seconds += time.perf_counter() - started

    def _clock_reaching(self, instant: float, what: str,
                        after: Optional[float] = None) -> Optional[float]:
        """Wait for /clock at or past instant (or past after); return it, None if stopped."""
        waited = 0.0
        with self._condition:
            while True:
                clock = self._clock
                if clock is not None and (clock > after if after is not None
                                          else clock >= instant - 1e-9):
                    return clock
                if self._stop.is_set():
                    return None
                if not self._condition.wait(PATIENCE):
                    waited += PATIENCE
                    self._log.warning('clock', f'sim_control: no /clock for {what} in '
                                               f'{waited:.0f} s; still waiting')

    def _measure_step(self) -> Optional[StepPlan]:
        """Take two single steps; the world's step size is the clock's advance over the second."""
        stamps = []
        for _ in range(2):
            before = self._clock if self._clock is not None else -1.0
            self.backend.step(1)
            stamp = self._clock_reaching(0.0, 'a single step (a /clock of its own? on one '
                                              "shared with another simulator, that one's "
                                              'clock hides this one)', after=before)
            if stamp is None:
                return None
            stamps.append(stamp)
        step = stamps[1] - stamps[0]
        if step <= 0.0:
            raise SimControlError(f"sim_control: the simulator's /clock did not advance over "
                                  f'a step ({stamps[0]:.6f} then {stamps[1]:.6f} s)')
        return StepPlan(stamps[1], step)


def start_sim_control(node: Node, config: BridgeConfig) -> Optional[SimStepper]:
    """Return the stepper sim_control asks for, or None (none, or its package is missing)."""
    if config.sim_control == SIM_CONTROL_NONE:
        return None
    try:
        return SimStepper(node, config)
    except SimControlError as error:
        node.core_logger.error(str(error))
        return None
