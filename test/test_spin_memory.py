"""The nodes' spin loop holds no memory per callback (rclpy's own loop did: 680 MB an hour)."""

import threading
import time
import tracemalloc

import pytest

rclpy = pytest.importorskip('rclpy', reason='needs ROS 2 (Humble or Jazzy) sourced')

from rclpy.executors import SingleThreadedExecutor  # noqa: E402, I100, I202
from rclpy.task import Future  # noqa: E402

from ardupilot_json_bridge.core.wakeup import Wakeup  # noqa: E402
from ardupilot_json_bridge.ros.node import spin_until_shutdown  # noqa: E402

# Timer callbacks between the two measurements; rclpy's spin_until_future_complete added a
# done-callback (a lambda, about 100 bytes) to the future at each, so 3000 held ~300 kB.
CALLBACKS = 3000
# What may stay allocated by rclpy's executor across them: its caches, not one per callback.
ALLOWED_GROWTH = 32 * 1024


def test_spinning_until_stopped_holds_no_memory_per_callback():
    rclpy.init()
    node = rclpy.create_node('spin_memory_probe')
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    calls = [0]
    node.create_timer(0.0002, lambda: calls.__setitem__(0, calls[0] + 1))
    stopped, stop, failure = Future(executor=executor), Wakeup(), []
    spinner = threading.Thread(target=spin_until_shutdown, daemon=True,
                               args=(executor, stopped, stop, failure))
    tracemalloc.start()
    try:
        spinner.start()
        deadline = time.monotonic() + 60.0
        while calls[0] < 500 and time.monotonic() < deadline:
            time.sleep(0.01)
        before, start_calls = tracemalloc.get_traced_memory()[0], calls[0]
        while calls[0] < start_calls + CALLBACKS and time.monotonic() < deadline:
            time.sleep(0.01)
        growth, counted = tracemalloc.get_traced_memory()[0] - before, calls[0] - start_calls
    finally:
        tracemalloc.stop()
        stopped.set_result(None)
        spinner.join(5.0)
        stop.close()
        executor.shutdown(timeout_sec=0)
        node.destroy_node()
        rclpy.shutdown()
    assert counted >= CALLBACKS
    assert not spinner.is_alive() and not failure
    assert growth < ALLOWED_GROWTH, f'{growth} bytes held over {counted} callbacks'
