"""
Lock-step through ROS, in-process: a bridge steps mujoco_sim to each frame SITL asks for.

mujoco_sim, paused, serves simulation_interfaces; a bridge with sim_control steps it to each
frame of a peer that reads as SITL reads.

Needs simulation_interfaces (a sourced ROS 2 Jazzy or Humble; the PyPI wheels lack it): skips
in one line elsewhere.
"""

import sys
import threading
import time

import pytest

rclpy = pytest.importorskip('rclpy', reason='needs ROS 2 (rclpy): source ROS or pip install '
                                            "'.[jazzy]'")
pytest.importorskip('simulation_interfaces',
                    reason='needs simulation_interfaces (apt install '
                           'ros-$ROS_DISTRO-simulation-interfaces, in a sourced ROS 2)')
pytest.importorskip('mujoco', reason='needs the mujoco package')
from rclpy.executors import MultiThreadedExecutor  # noqa: E402, I202
from rclpy.parameter import Parameter  # noqa: E402
from simulation_interfaces.msg import Result, SimulationState  # noqa: E402
from simulation_interfaces.srv import (  # noqa: E402
    GetSimulatorFeatures, SetSimulationState, StepSimulation)

from ardupilot_json_bridge.config import load_parameters_file, NODE_NAME  # noqa: E402
from ardupilot_json_bridge.ros.mujoco_sim import MujocoSim  # noqa: E402
from ardupilot_json_bridge.ros.node import JsonSitlBridge  # noqa: E402
from ardupilot_json_bridge.ros.sim_control import (  # noqa: E402
    interface, SimControlError, WARM_UP)
from conftest import free_udp_port  # noqa: E402
from sitl_peer import SitlPeer  # noqa: E402
from test_node_flight import CONFIG  # noqa: E402

STEP = 0.001   # mujoco_sim's default physics step (imu_rate 1000 Hz)
FRAMES = 1200


@pytest.fixture(scope='module', autouse=True)
def ros():
    rclpy.init()
    yield
    rclpy.shutdown()


class Nodes:
    """Nodes spun by a multi-threaded executor in a thread, destroyed at the end."""

    def __init__(self) -> None:
        self.executor = MultiThreadedExecutor()
        self.nodes = []
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def add(self, node):
        self.executor.add_node(node)
        self.nodes.append(node)
        return node

    def call(self, client, request, timeout: float = 10.0):
        assert client.wait_for_service(timeout_sec=timeout), client.srv_name
        future = client.call_async(request)
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        assert done.wait(timeout), f'{client.srv_name} did not answer'
        return future.result()

    def close(self) -> None:
        self.executor.shutdown()
        self.thread.join(5.0)
        for node in reversed(self.nodes):
            node.destroy_node()


@pytest.fixture
def nodes():
    n = Nodes()
    yield n
    n.close()


def paused_simulator(nodes: Nodes, namespace: str) -> MujocoSim:
    return nodes.add(MujocoSim(namespace=namespace,
                               parameter_overrides=[Parameter('paused', value=True)]))


def test_the_paused_simulator_steps_exactly_as_asked_and_refuses_what_it_cannot(nodes):
    sim = paused_simulator(nodes, 'stepped')
    client = nodes.add(rclpy.create_node('stepping_client'))
    features = nodes.call(client.create_client(
        GetSimulatorFeatures, '/stepped/mujoco_sim/get_simulator_features'),
        GetSimulatorFeatures.Request()).features.features
    assert {31, 32, 33, 24, 25, 26} <= set(features)  # SimulatorFeatures.msg's values
    time.sleep(0.3)
    assert sim.vehicle.time == 0.0   # paused from the start: no step on its own
    step = client.create_client(StepSimulation, '/stepped/mujoco_sim/step_simulation')
    answer = nodes.call(step, StepSimulation.Request(steps=7))
    assert answer.result.result == Result.RESULT_OK
    assert sim.vehicle.time == pytest.approx(7 * STEP, abs=1e-12)
    # Playing, stepping is refused (the standard's INCORRECT_STATE); stopping is not offered.
    state = client.create_client(SetSimulationState, '/stepped/mujoco_sim/set_simulation_state')
    play = SetSimulationState.Request()
    play.state.state = SimulationState.STATE_PLAYING
    assert nodes.call(state, play).result.result == Result.RESULT_OK
    refused = nodes.call(step, StepSimulation.Request(steps=1))
    assert refused.result.result == Result.RESULT_INCORRECT_STATE
    assert 'pause it first' in refused.result.error_message
    stop = SetSimulationState.Request()
    stop.state.state = SimulationState.STATE_STOPPED
    assert nodes.call(state, stop).result.result == Result.RESULT_FEATURE_UNSUPPORTED


def test_a_bridge_steps_the_simulator_to_each_frame_of_sitls_grid(nodes):
    sim = paused_simulator(nodes, 'locked')
    port = free_udp_port()
    overrides = [Parameter(name, value=value) for name, value in
                 load_parameters_file(CONFIG, NODE_NAME).items()]
    overrides += [Parameter('port', value=port),
                  Parameter('sim_control', value='simulation_interfaces'),
                  Parameter('sim_control_service', value='mujoco_sim')]
    bridge = nodes.add(JsonSitlBridge(namespace='locked', parameter_overrides=overrides))
    assert bridge.sim_control is not None
    # The bridge measures the step and steps through a warm-up on its own: wait for that.
    deadline = time.monotonic() + 30.0
    while (bridge.sim_control.plan is None or bridge.sim_control.round_trips == 0
           or sim.vehicle.time < bridge.sim_control.plan.reached - 1e-9):
        assert time.monotonic() < deadline, 'the bridge never stepped the simulator'
        time.sleep(0.05)
    time.sleep(0.5)   # the warm-up's messages reach the bridge: the grid starts at the last
    start = sim.vehicle.time
    peer = SitlPeer(port)
    try:
        replies = peer.lock_step(FRAMES, timeout=120.0)
    finally:
        peer.close()
    assert len(replies) == FRAMES
    # No frame waited for SITL's resend (frame 168 did, before the state took a sample within
    # SAME_INSTANT of a frame's instant as at it).
    assert peer.resends == 0
    # SITL's grid at 1200 Hz: reply k at k / 1200 s. Over the 119 frames after the first the
    # simulator went on to the first of its 1 ms steps at or after the last instant, so less
    # than 119 / 1200 s and a step; the grid starts at the newest IMU message the bridge had
    # at the first frame, which may be some steps before the simulator's time (best-effort
    # messages of the warm-up's burst): less by those.
    assert [r['timestamp'] for r in replies] == pytest.approx(
        [k / 1200 for k in range(FRAMES)], abs=1e-9)
    advanced = sim.vehicle.time - start
    last = (FRAMES - 1) / 1200
    assert last - 2 * WARM_UP <= advanced < last + STEP


def test_without_simulation_interfaces_the_mode_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, 'simulation_interfaces', None)
    monkeypatch.setitem(sys.modules, 'simulation_interfaces.srv', None)
    with pytest.raises(SimControlError, match=r'simulation_interfaces \(apt install '
                                              r'ros-\$ROS_DISTRO-simulation-interfaces\) is '
                                              r'not installed; the bridge follows'):
        interface('simulation_interfaces', 'srv.StepSimulation')


def test_without_simulation_interfaces_the_rest_of_the_node_works(nodes, monkeypatch):
    monkeypatch.setitem(sys.modules, 'simulation_interfaces', None)
    monkeypatch.setitem(sys.modules, 'simulation_interfaces.srv', None)
    bridge = nodes.add(JsonSitlBridge(namespace='unstepped', parameter_overrides=[
        Parameter('port', value=free_udp_port()),
        Parameter('sim_control', value='simulation_interfaces')]))
    assert bridge.sim_control is None
    assert bridge.link.process.poll() is None


def test_the_client_pauses_a_playing_simulator_and_steps_by_service_and_by_action(nodes):
    import logging
    from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
    from ardupilot_json_bridge.ros.sim_control import SimulationInterfaces, Waiter
    from ardupilot_json_bridge.ros.simulation_server import SimulationServer
    taken = []
    server = SimulationServer(nodes.add(rclpy.create_node('counting_simulator')),
                              lambda: taken.append(1), threading.Lock(), paused=False)
    stop = threading.Event()
    client = SimulationInterfaces(nodes.add(rclpy.create_node('stepping_bridge')),
                                  '/counting_simulator',
                                  Waiter(stop, RateLimitedLog(logging.getLogger(__name__))))
    assert client.wait_until_ready(stop)
    assert client.check() == 'StepSimulation'
    assert server.paused   # it was playing: the check paused it
    client.step(5)
    assert len(taken) == 5
    client._multiple = 'action'   # as with a simulator whose service takes single steps only
    client.step(3)
    assert len(taken) == 8
