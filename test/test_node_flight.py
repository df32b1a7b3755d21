"""
Real ArduCopter flies through the bridge node, fed by a free-running ROS 2 simulator.

The node and mujoco_sim run as users start them (`ardupilot-json-bridge node` and
`ardupilot-json-bridge mujoco-sim`, with --ros-args), in a namespace, on simulated time. Skips
where rclpy, mujoco or the prebuilt SITL (ARDUPILOT_SITL_DIR) is missing.
"""

import os
import threading

import pytest

pytest.importorskip('rclpy', reason='needs ROS 2 (rclpy): source ROS or pip install '
                                    "'.[jazzy]'")
pytest.importorskip('mujoco', reason='needs the mujoco package')

from ardupilot_json_bridge.messages.cdr import decode_odometry  # noqa: E402
from conftest import reaped  # noqa: E402
from node_processes import CONFIG, start  # noqa: E402
from ros2_tools import free_instances  # noqa: E402
import sitl_flight  # noqa: E402


def frames_line(output: str) -> str:
    """Return the node's last statement of physics passed over, if any."""
    skipped = [line for line in output.splitlines() if 'behind physics' in line]
    return skipped[-1] if skipped else 'no physics passed over'


class SimulatorTruth:
    """The simulator's own height above its start, from its odometry topic."""

    def __init__(self, topic: str, domain_id: int) -> None:
        import rclpy
        from nav_msgs.msg import Odometry
        from rclpy.executors import SingleThreadedExecutor
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node('flight_truth', context=self.context)
        self.start, self.height = None, 0.0
        # Raw, decoded here: a full rclpy conversion at 250 Hz would load the machine.
        self.node.create_subscription(Odometry, topic, self._on_odometry, 10, raw=True)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _on_odometry(self, data: bytes) -> None:
        z = decode_odometry(data).pose.pose.position.z
        if self.start is None:
            self.start = z
        self.height = z - self.start

    def close(self) -> None:
        import rclpy
        self.executor.shutdown()
        self.thread.join(5.0)
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


@pytest.mark.skipif(sitl_flight.sitl_binary() is None,
                    reason=f'real ArduCopter: set {sitl_flight.SITL_DIR_VARIABLE} to a folder '
                           'with arducopter and copter.parm')
# Gazebo's usual rates (1 kHz IMU, 250 Hz odometry). (A simulator publishing at 250 Hz flies
# through the node in test/ros2/test_mujoco_launch.py, under ros2 launch.)
@pytest.mark.parametrize('imu_rate, odom_rate', [(1000, 250)])
def test_real_arducopter_flies_through_the_node(imu_rate, odom_rate):
    domain_id = int(os.environ['ROS_DOMAIN_ID'])  # the run's (conftest)
    environment = dict(os.environ)
    (instance,) = free_instances(1)  # another suite's SITL may hold a fixed one
    with reaped(start('mujoco-sim', '--ros-args', '-r', '__ns:=/quad', '-p',
                      f'imu_rate:={imu_rate}.0', '-p', f'odom_rate:={odom_rate}.0',
                      '-p', sitl_flight.PACED,
                      environment=environment)) as sim, \
            reaped(start('node', '--ros-args', '-r', '__ns:=/quad', '--params-file', CONFIG,
                         '-p', 'use_sim_time:=true', '-p', f'instance:={instance}',
                         environment=environment)) as node:
        truth = SimulatorTruth('/quad/odom', domain_id)
        try:
            with sitl_flight.Sitl(instance=instance, speedup=1) as sitl:
                record = sitl_flight.fly(
                    sitl, 5.0, 5.0, lambda: truth.height,
                    timeout=sitl_flight.FLIGHT_TIMEOUT / sitl_flight.REAL_TIME_FACTOR)
                log = sitl.log()
                gyro_rate, loop_rate, long_loops = sitl.figures()
        finally:
            truth.close()
        for process in (node, sim):
            process.terminate()
        node_output, _ = node.communicate(timeout=15)
        sim_output, _ = sim.communicate(timeout=15)
    tail = sitl_flight.tail
    figures = (f'SITL gyro rate {gyro_rate} Hz, loop rate {loop_rate} Hz, {long_loops} long '
               f'loops; node: {frames_line(node_output)}')
    print(f'\n{imu_rate} Hz IMU: {figures}')
    assert node.returncode == 0 and sim.returncode == 0, tail(node_output + sim_output)
    assert record.frame == 'Frame: QUAD/X', record.texts
    assert record.armed and record.reached, '\n'.join([
        figures, 'SITL said: ' + ' | '.join(record.texts[-20:]), 'node: ' + tail(node_output),
        'SITL: ' + tail(log)])
    assert record.sim_seconds >= 5.0
    assert record.worst_hover_error(5.0) < 0.5, f'{figures}; last samples {record.hover[-5:]}'
    # SITL's altitude against the simulator's
    assert record.worst_truth_error() < 0.5, f'{figures}; last samples {record.hover[-5:]}'
    assert record.landed, record.texts[-20:]
    assert 'Traceback' not in node_output + sim_output, tail(node_output + sim_output)
    # The live convention checks judged the simulator's REP-103 output: no check turned wrong.
    assert 'conventions:' not in node_output, tail(node_output)
    print(f'flight through the node ({imu_rate} Hz IMU, {odom_rate} Hz odometry): hover error '
          f'{record.worst_hover_error(5.0):.3f} m (from the simulator truth '
          f'{record.worst_truth_error():.3f} m) over {record.sim_seconds:.1f} s, '
          f'{record.wall_seconds:.0f} s wall; {figures}')
