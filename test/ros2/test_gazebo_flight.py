"""
gazebo.launch.py flies real ArduCopter in real Gazebo (Harmonic, through ros_gz_bridge).

Gazebo runs server-only (no display here) at half the wall clock, as the README advises for a
small or busy machine; SITL is the project's quad X. The hover is judged on Gazebo's own pose
of the model (OdometryPublisher's pose: the world pose of the model, no noise), not on SITL's
estimate. Skips in one line where Gazebo and ros_gz (source /opt/gz/harmonic/activate.sh) or
the prebuilt SITL (ARDUPILOT_SITL_DIR) are missing.
"""

import os
import shutil
from typing import Optional

import pytest

from ros2_tools import free_instances, launch, stop
import sitl_flight

GAZEBO_ALTITUDE = 10.0
# The bound: SITL's altitude and the target, each against Gazebo's pose of the model.
GAZEBO_HOVER_TOLERANCE = 0.3


def gazebo_missing() -> Optional[str]:
    """Return why Gazebo flights cannot run here, or None when they can."""
    if shutil.which('gz') is None:
        return 'needs Gazebo Harmonic and ros_gz (source /opt/gz/harmonic/activate.sh): no gz'
    from ament_index_python.packages import get_package_share_directory
    for package in ('ros_gz_sim', 'ros_gz_bridge'):
        try:
            get_package_share_directory(package)
        except LookupError:
            return f'needs ros_gz ({package} is not in the sourced ROS 2)'
    return None


@pytest.fixture
def gazebo(sourced_ros2) -> None:
    """Skip (one line) without Gazebo; give Gazebo transport a partition of this run's own."""
    reason = gazebo_missing()
    if reason:
        pytest.skip(reason)
    if sitl_flight.sitl_binary() is None:
        pytest.skip(f'real ArduCopter: set {sitl_flight.SITL_DIR_VARIABLE} to a folder with '
                    'arducopter and copter.parm')
    # Gazebo transport finds every process of its partition on the machine, as DDS does
    # within a domain: another run's Gazebo must not be heard.
    os.environ['GZ_PARTITION'] = f'ardupilot_json_bridge_{os.getpid()}'


def test_real_arducopter_hovers_at_10_m_in_gazebo_through_gazebo_launch(gazebo):
    from test_mujoco_launch import fly_launched
    (instance,) = free_instances(1)
    launched = launch('gazebo.launch.py', 'server_only:=true', f'instance:={instance}',
                      sitl_flight.PACED)
    try:
        flight = fly_launched([instance], launched, GAZEBO_ALTITUDE,
                              lambda _: '/quad/odom')[instance]
    finally:
        output = stop(launched)
    print(f'gazebo.launch.py, server only, {sitl_flight.PACED}: {flight.summary()}')
    flight.launch_output = output
    record = flight.record
    assert record.armed and record.reached, (record.texts, output[-3000:],
                                             flight.sitl_log[-2000:])
    assert record.frame == 'Frame: QUAD/X', record.texts
    assert record.sim_seconds >= 5.0
    heights = [truth for _, _, truth in record.hover]
    print(f"Gazebo's height over the hover: {min(heights):.3f} to {max(heights):.3f} m")
    assert max(abs(h - GAZEBO_ALTITUDE) for h in heights) < GAZEBO_HOVER_TOLERANCE, record.hover
    assert record.worst_truth_error() < GAZEBO_HOVER_TOLERANCE, record.hover
    assert record.landed, ('not disarmed after LAND; SITL said', record.texts[-10:])
    # Gazebo, ros_gz_bridge and the bridge ended cleanly on Ctrl-C.
    assert output.count('process has finished cleanly') == 3, output[-3000:]
