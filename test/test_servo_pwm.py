"""Reading a recording's servo_pwm: the stamped JointState, and older bags' UInt16MultiArray."""

import numpy as np

from ardupilot_json_bridge.messages.servo_pwm import pwm_sample
import ros_messages

STORE = ros_messages.STORES['jazzy']


def joint_state(stamp: float, positions):
    return STORE.types['sensor_msgs/msg/JointState'](
        header=ros_messages.header(STORE, stamp),
        name=[f'servo{n + 1}' for n in range(len(positions))],
        position=np.array(positions, dtype=np.float64),
        velocity=np.array([], dtype=np.float64), effort=np.array([], dtype=np.float64))


def test_a_stamped_frame_is_placed_at_its_stamp_not_its_log_time():
    assert pwm_sample(joint_state(12.25, [1100, 1900]), 12.3) == (12.25, (1100, 1900), None)


def test_an_older_recordings_frame_is_placed_at_its_log_time():
    old = STORE.types['std_msgs/msg/UInt16MultiArray'](
        layout=STORE.types['std_msgs/msg/MultiArrayLayout'](dim=[], data_offset=0),
        data=np.array([1500, 1000], dtype=np.uint16))
    assert pwm_sample(old, 7.5) == (7.5, (1500, 1000), None)


def test_positions_that_are_no_pulse_widths_are_named_not_read():
    for positions in ([1500.5, 1000.0], [-1.0], [70000.0], [float('nan')]):
        stamp, pwm, problem = pwm_sample(joint_state(3.0, positions), 3.1)
        assert pwm == () and problem.startswith('servo_pwm at 3.000 s: positions'), positions
