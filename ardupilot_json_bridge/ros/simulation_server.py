"""
The simulator's side of simulation_interfaces, for mujoco-sim: pause, play and step it.

Offers, under the node's name (~/): GetSimulatorFeatures, GetSimulationState,
SetSimulationState (playing and paused; stopping resets, which mujoco-sim cannot),
StepSimulation and the SimulateSteps action. Steps are taken in the service's callback, under
the physics lock, while the physics thread waits (paused); each step publishes its messages
before the call returns, as the standard asks (the call returns once stepping is complete).
"""

import threading
from typing import Any, Callable

from rclpy.action import ActionServer
from rclpy.node import Node
from simulation_interfaces.action import SimulateSteps
from simulation_interfaces.msg import Result, SimulationState, SimulatorFeatures
from simulation_interfaces.srv import (
    GetSimulationState, GetSimulatorFeatures, SetSimulationState, StepSimulation)

# A single request may ask for at most this many steps (a service call blocks the executor
# meanwhile; the action takes them with feedback).
MAX_STEPS_A_CALL = 1_000_000


class SimulationServer:
    """simulation_interfaces for a simulator whose physics thread waits while paused."""

    def __init__(self, node: Node, step: Callable[[], None], lock: threading.Lock,
                 paused: bool) -> None:
        """Serve on node; step() takes one physics step (called under lock)."""
        self._step = step
        self._lock = lock
        self._condition = threading.Condition()
        self.paused = paused
        node.create_service(GetSimulatorFeatures, '~/get_simulator_features', self._features)
        node.create_service(GetSimulationState, '~/get_simulation_state', self._get_state)
        node.create_service(SetSimulationState, '~/set_simulation_state', self._set_state)
        node.create_service(StepSimulation, '~/step_simulation', self._step_service)
        self._action = ActionServer(node, SimulateSteps, '~/simulate_steps', self._step_action)

    def wait_while_paused(self, stop: threading.Event) -> bool:
        """Physics thread: block while paused (until stop); return whether it waited."""
        waited = False
        with self._condition:
            while self.paused and not stop.is_set():
                waited = True
                self._condition.wait(0.5)
        return waited

    def wake(self) -> None:
        """Wake the physics thread (stopping)."""
        with self._condition:
            self._condition.notify_all()

    def _features(self, request: Any, response: Any) -> Any:
        f = SimulatorFeatures
        response.features.features = [
            f.SIMULATION_STATE_GETTING, f.SIMULATION_STATE_SETTING, f.SIMULATION_STATE_PAUSE,
            f.STEP_SIMULATION_SINGLE, f.STEP_SIMULATION_MULTIPLE, f.STEP_SIMULATION_ACTION]
        response.features.custom_info = 'ardupilot_json_bridge mujoco-sim'
        return response

    def _get_state(self, request: Any, response: Any) -> Any:
        states = SimulationState
        response.state.state = states.STATE_PAUSED if self.paused else states.STATE_PLAYING
        response.result.result = Result.RESULT_OK
        return response

    def _set_state(self, request: Any, response: Any) -> Any:
        states = SimulationState
        wanted = request.state.state
        if wanted not in (states.STATE_PLAYING, states.STATE_PAUSED):
            response.result.result = Result.RESULT_FEATURE_UNSUPPORTED
            response.result.error_message = ('mujoco-sim only plays and pauses (state '
                                             f'{wanted} is not supported)')
            return response
        pause = wanted == states.STATE_PAUSED
        if pause == self.paused:
            response.result.result = response.ALREADY_IN_TARGET_STATE
            return response
        with self._lock:  # a step the physics thread is taking ends first
            with self._condition:
                self.paused = pause
                self._condition.notify_all()
        response.result.result = Result.RESULT_OK
        return response

    def _refusal(self, steps: int) -> str:
        """Why steps cannot be taken now; empty if they can."""
        if not self.paused:
            return 'the simulation is playing: pause it first (SetSimulationState)'
        if steps > MAX_STEPS_A_CALL:
            return f'{steps} steps in one call; at most {MAX_STEPS_A_CALL}'
        return ''

    def _step_service(self, request: Any, response: Any) -> Any:
        refusal = self._refusal(request.steps)
        if refusal:
            response.result.result = Result.RESULT_INCORRECT_STATE \
                if not self.paused else Result.RESULT_OPERATION_FAILED
            response.result.error_message = refusal
            return response
        with self._lock:
            for _ in range(request.steps):
                self._step()
        response.result.result = Result.RESULT_OK
        return response

    def _step_action(self, goal: Any) -> Any:
        result = SimulateSteps.Result()
        steps = goal.request.steps
        refusal = self._refusal(steps)
        if refusal:
            goal.abort()
            result.result.result = Result.RESULT_INCORRECT_STATE \
                if not self.paused else Result.RESULT_OPERATION_FAILED
            result.result.error_message = refusal
            return result
        feedback = SimulateSteps.Feedback()
        for done in range(1, steps + 1):
            with self._lock:
                self._step()
            feedback.completed_steps, feedback.remaining_steps = done, steps - done
            goal.publish_feedback(feedback)
        goal.succeed()
        result.result.result = Result.RESULT_OK
        return result
