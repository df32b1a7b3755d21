"""
The lock-step client's waits: an unanswered query is asked again, then one clear error.

A query's answer can be lost while a service's connection is still being made; the client
then asked GetSimulatorFeatures once and waited forever (it hung a CI run). Plain futures
stand in for rclpy's: the Waiter only adds a done callback and reads the result.
"""

from concurrent.futures import Future
import logging
import threading
import time
from types import SimpleNamespace
from typing import Tuple

import pytest

pytest.importorskip('rclpy', reason="needs ROS 2 (rclpy): source ROS or pip install '.[jazzy]'")
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog  # noqa: E402, I202
from ardupilot_json_bridge.ros import sim_control  # noqa: E402
from ardupilot_json_bridge.ros.sim_control import (  # noqa: E402
    GzControlWorld, SimControlError, SimulationInterfaces, Waiter)

PATIENCE = 0.2


@pytest.fixture
def waiter(monkeypatch, caplog):
    monkeypatch.setattr(sim_control, 'QUERY_PATIENCE', PATIENCE)
    caplog.set_level(logging.WARNING)
    stop = threading.Event()
    return Waiter(stop, RateLimitedLog(logging.getLogger('sim_control_test'))), stop


def answered(value: str) -> Future:
    future = Future()
    future.set_result(value)
    return future


@pytest.mark.parametrize('lost', [1, 4])
def test_a_query_whose_answer_is_lost_is_asked_again(waiter, caplog, lost):
    wait, _ = waiter
    asked = []

    def ask_again() -> Future:
        asked.append(time.monotonic())
        return Future() if len(asked) < lost else answered('features')

    started = time.monotonic()
    assert wait.result(Future(), 'get_simulator_features', ask_again) == 'features'
    assert len(asked) == lost
    # Each request was given QUERY_PATIENCE before the next went (longer on a busy machine).
    assert asked[-1] - started >= lost * PATIENCE
    warnings = [r.getMessage() for r in caplog.records if 'asking again' in r.getMessage()]
    assert warnings and 'get_simulator_features has not answered in 0.2 s' in warnings[0]


def test_a_query_never_answered_is_one_clear_error_not_a_hang(waiter):
    wait, _ = waiter
    asked = []
    started = time.monotonic()
    with pytest.raises(SimControlError, match=r'get_simulator_features did not answer 5 '
                                              r'requests in 1 s'):
        wait.result(Future(), 'get_simulator_features', lambda: asked.append(1) or Future())
    assert len(asked) == sim_control.QUERY_ATTEMPTS - 1
    assert time.monotonic() - started < 10.0   # a bound, not a hang (a busy machine is slow)


def test_an_answer_to_an_earlier_request_is_taken(waiter):
    """A simulator slower than QUERY_PATIENCE: its first answer comes after the second ask."""
    wait, _ = waiter
    first, again = Future(), []

    def ask_again() -> Future:
        again.append(Future())
        if len(again) == 1:
            first.set_result('features')   # the first request's answer, late
        return again[-1]

    assert wait.result(first, 'get_simulator_features', ask_again) == 'features'
    assert len(again) == 1


class SilentClient:
    """A service client whose requests are never answered; counts them."""

    srv_name = '/silent'

    def __init__(self) -> None:
        self.requests = []

    def call_async(self, request: object) -> Future:
        self.requests.append(request)
        return Future()


def silent_backend(kind: str, waiter: Waiter) -> Tuple[object, SilentClient]:
    """Return a stepping backend of kind whose service never answers (no ROS graph needed)."""
    client = SilentClient()
    if kind == 'simulation_interfaces':
        backend = SimulationInterfaces.__new__(SimulationInterfaces)
        backend._step = backend._features = client
        backend._step_type = backend._features_type = SimpleNamespace(Request=SimpleNamespace)
        backend._multiple = 'service'
    else:
        backend = GzControlWorld.__new__(GzControlWorld)
        backend._client = client
        backend._type = SimpleNamespace(
            Request=lambda: SimpleNamespace(world_control=SimpleNamespace()))
    backend._waiter, backend.where = waiter, client.srv_name
    return backend, client


@pytest.mark.parametrize('kind', ['simulation_interfaces', 'gz_control_world'])
def test_a_backend_sends_a_step_once_but_asks_a_check_again(waiter, kind):
    wait, stop = waiter
    backend, client = silent_backend(kind, wait)
    thread = threading.Thread(target=backend.step, args=(3,))
    thread.start()
    time.sleep(4 * PATIENCE)
    assert thread.is_alive() and len(client.requests) == 1   # a step is not sent again
    stop.set()
    thread.join(2.0)
    assert not thread.is_alive()
    # The check, a query, is asked again until it gives up in one clear error.
    stop.clear()
    client.requests.clear()
    with pytest.raises(SimControlError, match='did not answer'):
        backend.check()
    assert len(client.requests) == sim_control.QUERY_ATTEMPTS


def test_a_step_is_never_asked_twice_and_stop_ends_its_wait(waiter):
    wait, stop = waiter
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(wait.result(Future(), 'step')))
    thread.start()
    time.sleep(3 * PATIENCE)
    assert thread.is_alive()   # still waiting: a step is not sent again
    stop.set()
    thread.join(1.0)
    assert not thread.is_alive() and outcome == [None]


class ScriptedClient(SilentClient):
    """A service client answering its requests in turn from a script (None: never)."""

    def __init__(self, *answers: object) -> None:
        super().__init__()
        self._answers = list(answers)

    def call_async(self, request: object) -> Future:
        future = super().call_async(request)
        answer = self._answers.pop(0)
        if answer is not None:
            future.set_result(answer)
        return future


def test_a_pause_asked_again_is_already_done_and_that_is_success(waiter):
    """The first pause reached the simulator, its answer did not: the second is 'already'."""
    wait, _ = waiter
    backend = SimulationInterfaces.__new__(SimulationInterfaces)
    backend._waiter, backend.where = wait, '/sim/step_simulation'
    backend._get_state = ScriptedClient(SimpleNamespace(state=SimpleNamespace(
        state=sim_control.STATE_PLAYING)))
    already = 101   # simulation_interfaces/srv/SetSimulationState ALREADY_IN_TARGET_STATE
    backend._set_state = ScriptedClient(None, SimpleNamespace(
        result=SimpleNamespace(result=already, error_message='already paused'),
        ALREADY_IN_TARGET_STATE=already))
    backend._get_state_type = backend._set_state_type = SimpleNamespace(
        Request=lambda: SimpleNamespace(state=SimpleNamespace()))
    backend._pause_if_playing({sim_control.STATE_GETTING, sim_control.STATE_SETTING,
                               sim_control.STATE_PAUSE})
    assert len(backend._set_state.requests) == 2
