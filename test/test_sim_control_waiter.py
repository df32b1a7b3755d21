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

import pytest

pytest.importorskip('rclpy', reason="needs ROS 2 (rclpy): source ROS or pip install '.[jazzy]'")
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog  # noqa: E402, I202
from ardupilot_json_bridge.ros import sim_control  # noqa: E402
from ardupilot_json_bridge.ros.sim_control import SimControlError, Waiter  # noqa: E402

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
    # Each request was given QUERY_PATIENCE before the next went.
    assert asked[-1] - started == pytest.approx(lost * PATIENCE, abs=0.15)
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
    assert time.monotonic() - started < sim_control.QUERY_ATTEMPTS * PATIENCE + 0.5


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
