"""
`ros2 bag record` stops whole on Ctrl-C, even where the tests were started with SIGINT ignored.

A shell starts a background job (a CI run with `&`, nohup) with SIGINT ignored, and the
commands the tests start inherit that unless ros2_tools.Running gives them a terminal's
Ctrl-C: rosbag2 then never closed the bag (no metadata.yaml), and test_mujoco_launch.py's
recorded flight with it.
"""

import signal

import pytest

from ros2_tools import bag_info_counts, ros2, Running, stop_recorder

pytestmark = pytest.mark.usefixtures('sourced_ros2')


def test_ros2_bag_record_stops_whole_on_ctrl_c_where_sigint_was_ignored(tmp_path):
    bag = str(tmp_path / 'chatter')
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        recorder = Running(['ros2', 'bag', 'record', '-s', 'mcap', '-o', bag, '/chatter'])
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        assert recorder.wait_for_text('Recording...', 30), recorder.output[-2000:]
        # --times waits for the recorder's subscription before the first message.
        published = ros2('topic', 'pub', '--times', '20', '--rate', '10', '--keep-alive', '1.0',
                         '/chatter', 'std_msgs/msg/String', '{data: hello}')
        assert published.returncode == 0, published.stdout[-2000:]
    finally:
        stop_recorder(recorder, bag, limit=30.0)
    assert bag_info_counts(bag) == {'/chatter': 20}
