"""
Real ArduPlane flies the MuJoCo plane through the bridge node and the mujoco_sim node.

Both run as users start them, on simulated time: the surfaces and propeller on the Float64
topics config/mujoco_plane.yaml publishes, airspeed and wind back on `airspeed` and `wind`.
Skips where rclpy, mujoco or the prebuilt arduplane (ARDUPILOT_SITL_DIR) is missing.
"""

import os

import pytest

pytest.importorskip('rclpy', reason='needs ROS 2 (rclpy): source ROS or pip install '
                                    "'.[jazzy]'")
pytest.importorskip('mujoco', reason='needs the mujoco package')

from conftest import reaped  # noqa: E402
import sitl_flight  # noqa: E402
import sitl_plane  # noqa: E402
from test_mujoco_plane import judge_circuit  # noqa: E402
from test_node_flight import start  # noqa: E402
from test_node_rover import CONFIG, PositionTruth, stopped  # noqa: E402


@pytest.mark.skipif(sitl_plane.plane_binary() is None,
                    reason='real ArduPlane: set ARDUPILOT_SITL_DIR to a folder with arduplane '
                           'and plane.parm')
def test_real_arduplane_takes_off_loiters_and_returns_through_the_node_in_a_wind():
    domain_id = int(os.environ['ROS_DOMAIN_ID'])  # the run's (conftest)
    environment = dict(os.environ, ROS_DOMAIN_ID=str(domain_id),
                       ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    instance, wind = 7, (-5.0, 0.0, 0.0)
    with reaped(start('mujoco-sim', '--ros-args', '-r', '__ns:=/plane', '-p',
                      'vehicle:=plane', '-p', f'wind:=[{wind[0]}, {wind[1]}, {wind[2]}]',
                      '-p', sitl_flight.PACED,
                      environment=environment)) as sim, \
            reaped(start('node', '--ros-args', '-r', '__ns:=/plane', '--params-file',
                         os.path.join(CONFIG, 'mujoco_plane.yaml'), '-p', 'use_sim_time:=true',
                         '-p', f'instance:={instance}', environment=environment)) as node:
        truth = PositionTruth('/plane/odom', domain_id)
        try:
            with sitl_plane.plane_sitl(instance=instance) as sitl:
                record = sitl_plane.fly_circuit(
                    sitl, lambda: truth.position,
                    timeout=sitl_plane.CIRCUIT_TIMEOUT / sitl_flight.REAL_TIME_FACTOR)
                log = sitl.log()
        finally:
            truth.close()
        node_output, _ = stopped(node, sim)
    assert record.took_off, (record.texts[-8:], node_output[-1000:], log[-1000:])
    judge_circuit(record, wind, 'through the node')
