"""
The project's own bags are rosbag2's: `ros2 bag info` opens them and `ros2 bag play` plays them.

The shipped sample bag (SQLite, zstd) and a flight written by `ardupilot-json-bridge mujoco
--record` (MCAP), each played into bridge.launch.py serving a SITL peer.
"""

import os
import shutil

import numpy as np
import pytest

from ros2_tools import bag_info_counts, free_instances, launch, read_bag, Running, stop
from sitl_peer import SitlPeer

pytestmark = pytest.mark.usefixtures('sourced_ros2')
CLI = ['ros2', 'run', 'ardupilot_json_bridge', 'ardupilot-json-bridge']
SAMPLE = os.path.join(os.path.dirname(__file__), '..', '..', 'ardupilot_json_bridge', 'sources',
                      'data', 'resting_vehicle')


def mujoco_recording(folder: str) -> str:
    """Record 1.5 s of the lock-step MuJoCo quad at rest, stepped by a SITL peer."""
    pytest.importorskip('mujoco', reason='needs the mujoco package')
    bag = os.path.join(folder, 'flight')
    (instance,) = free_instances(1)
    engine = Running([*CLI, 'mujoco', '--record', bag, '--instance', str(instance)])
    peer = SitlPeer(9002 + 10 * instance)
    try:
        assert engine.wait_for_text('listening on UDP', 60), engine.output
        assert len(peer.lock_step(1800, [1000] * 16, timeout=60.0)) == 1800
    finally:
        peer.close()
        engine.interrupt()
    assert 'Traceback' not in engine.output, engine.output[-2000:]
    return bag


@pytest.mark.parametrize('which', ['sample', 'mujoco --record'])
def test_the_projects_bags_open_in_ros2_bag_info_and_play_into_the_node(which, tmp_path):
    if which == 'sample':
        # A copy: playing a compressed bag leaves the decompressed file beside it.
        bag = shutil.copytree(SAMPLE, str(tmp_path / 'sample'))
    else:
        bag = mujoco_recording(str(tmp_path))
    counts = bag_info_counts(bag)
    messages = read_bag(bag)
    assert counts == {topic: len(received) for topic, received in messages.items()}
    assert counts['/imu'] > 0 and counts['/odom'] > 0
    # Resting: every recorded odometry sample at one place, which SITL must be told (NED).
    east, north, up = np.array([[m.pose.pose.position.x, m.pose.pose.position.y,
                                 m.pose.pose.position.z] for _, m in messages['/odom']]).mean(0)
    (instance,) = free_instances(1)
    peer = SitlPeer(9002 + 10 * instance)
    launched = launch('bridge.launch.py', f'instance:={instance}', 'use_sim_time:=true')
    # The sample bag has no /clock: the player gives one. The recording holds its own.
    clock = [] if '/clock' in counts else ['--clock']
    player = Running(['ros2', 'bag', 'play', bag, '--loop', *clock])
    try:
        assert launched.wait_for_text('listening on UDP', 60), launched.output
        replies = peer.lock_step(600, [1000] * 16, timeout=60.0)
    finally:
        peer.close()
        player.interrupt()
        stop(launched)
    assert len(replies) == 600, launched.output[-2000:]
    assert 'Traceback' not in player.output, player.output[-2000:]
    for reply in replies:
        assert reply['position'] == pytest.approx((north, east, -up), abs=1e-3)
        assert reply['imu.accel_body'] == pytest.approx((0.0, 0.0, -9.80665), abs=0.05)
