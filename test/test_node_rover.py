"""
Real ArduRover drives the MuJoCo rovers through the bridge node and the mujoco_sim node.

Both run as users start them, on simulated time, the simulator taking the steering and wheel
commands on the ros2_control forward controllers' topics that config/mujoco_rover*.yaml
publish. Skips where rclpy, mujoco or the prebuilt ardurover (ARDUPILOT_SITL_DIR) is missing.
"""

import os
from typing import Tuple

import pytest

pytest.importorskip('rclpy', reason='needs ROS 2 (rclpy): source ROS or pip install '
                                    "'.[jazzy]'")
pytest.importorskip('mujoco', reason='needs the mujoco package')

from ardupilot_json_bridge.messages.cdr import decode_odometry  # noqa: E402
from conftest import reaped  # noqa: E402
import sitl_flight  # noqa: E402
import sitl_rover  # noqa: E402
from test_mujoco_rover import mission_figures  # noqa: E402
from test_node_flight import SimulatorTruth, start  # noqa: E402

CONFIG = os.path.join(os.path.dirname(__file__), '..', 'config')


class PositionTruth(SimulatorTruth):
    """The simulator's own position (ENU, from its start on the ground), from its odometry."""

    position = (0.0, 0.0, 0.0)

    def _on_odometry(self, data: bytes) -> None:
        point = decode_odometry(data).pose.pose.position
        self.position = (point.x, point.y, point.z)


def stopped(node, sim) -> Tuple[str, str]:
    """Stop the bridge node and the simulator; check they ended cleanly; return their output."""
    node.terminate()
    sim.terminate()
    node_output, sim_output = (process.communicate(timeout=15)[0] for process in (node, sim))
    assert node.returncode == 0 and sim.returncode == 0, (node_output + sim_output)[-2000:]
    assert 'Traceback' not in node_output + sim_output
    return node_output, sim_output


@pytest.mark.skipif(sitl_rover.rover_binary() is None,
                    reason='real ArduRover: set ARDUPILOT_SITL_DIR to a folder with ardurover '
                           'and rover.parm')
# Skid steering: the preset mixes throttle and steering into two wheel commands. (The
# Ackermann rover drives through the engine in test_mujoco_rover.py; through the node it took
# CI 2.4 minutes more for the same node.)
@pytest.mark.parametrize('vehicle, wp_speed', [('rover_skid', 3.0)])
def test_real_ardurover_drives_a_20_m_square_through_the_node(vehicle, wp_speed):
    domain_id = int(os.environ['ROS_DOMAIN_ID'])  # the run's (conftest)
    environment = dict(os.environ, ROS_DOMAIN_ID=str(domain_id),
                       ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    instance = 5
    preset = os.path.join(CONFIG, f'mujoco_{vehicle}.yaml')
    with reaped(start('mujoco-sim', '--ros-args', '-r', '__ns:=/rover', '-p',
                      f'vehicle:={vehicle}', '-p', sitl_flight.PACED,
                      environment=environment)) as sim, \
            reaped(start('node', '--ros-args', '-r', '__ns:=/rover', '--params-file', preset,
                         '-p', 'use_sim_time:=true', '-p', f'instance:={instance}',
                         environment=environment)) as node:
        truth = PositionTruth('/rover/odom', domain_id)
        try:
            with sitl_rover.rover_sitl(instance=instance, skid=vehicle == 'rover_skid') as sitl:
                record, corners = sitl_rover.drive_square(
                    sitl, 20.0, lambda: truth.position[:2],
                    timeout=sitl_rover.SQUARE_TIMEOUT / sitl_flight.REAL_TIME_FACTOR)
                log = sitl.log()
        finally:
            truth.close()
        node_output, sim_output = stopped(node, sim)
    assert record.armed and record.finished, (record.reached, record.texts[-8:],
                                              node_output[-1000:], log[-1000:])
    miss, cross_track, home = mission_figures(record, corners, wp_speed)
    corner = sitl_rover.worst_path_distance(record.track, corners)
    print(f'\n{vehicle} through the node: square of 20 m in AUTO in {record.wall_seconds:.0f} '
          f's: worst waypoint miss {miss:.2f} m, cross-track error {cross_track:.2f} m along '
          f'the legs, {corner:.2f} m at worst (corners), home error {home:.2f} m')
    # ArduRover itself said it reached each waypoint (within WP_RADIUS 3 m by its estimate);
    # the truth's closest approach, sampled with SITL's messages, may lie a little further.
    assert record.reached == [1, 2, 3, 4], record.reached
    assert miss < 3.5 and cross_track < 1.0 and home < 2.0, (miss, cross_track, home)
