"""ENU/FLU to NED/FRD, checked by named cases and against scipy as an independent library."""

import math
import re

from hypothesis import given, settings, strategies as st
import numpy as np
import pytest
from scipy.spatial.transform import Rotation
import transforms3d

from ardupilot_json_bridge.core.frames import (
    enu_to_ned, flu_to_frd, propagate_attitude, quaternion_to_euler, quaternion_to_matrix,
    ros_to_ned_frd, rpy_to_matrix)
from ardupilot_json_bridge.messages.inputs import imu_mounting

unit = st.floats(-1.0, 1.0, allow_nan=False)
angle = st.floats(-math.pi, math.pi, allow_nan=False)
finite = st.floats(-1e3, 1e3, allow_nan=False)


def ros_quaternion(roll: float, pitch: float, yaw: float):
    """x, y, z, w of ROS roll/pitch/yaw (fixed axes), via scipy."""
    return Rotation.from_euler('xyz', [roll, pitch, yaw]).as_quat()


def ned_euler(q_wxyz):
    return np.degrees(quaternion_to_euler(q_wxyz))


def test_vectors_change_axes():
    assert list(enu_to_ned([1.0, 2.0, 3.0])) == [2.0, 1.0, -3.0]
    assert list(flu_to_frd([1.0, 2.0, 3.0])) == [1.0, -2.0, -3.0]


@pytest.mark.parametrize('enu_yaw_deg,ned_yaw_deg', [(0, 90), (90, 0), (180, -90), (-90, 180)])
def test_heading(enu_yaw_deg, ned_yaw_deg):
    q = ros_to_ned_frd(*ros_quaternion(0, 0, math.radians(enu_yaw_deg)))
    roll, pitch, yaw = ned_euler(q)
    assert (roll, pitch) == pytest.approx((0, 0), abs=1e-9)
    assert math.remainder(yaw - ned_yaw_deg, 360) == pytest.approx(0, abs=1e-9)


def test_level_at_rest_reads_minus_g():
    accel_frd = np.array(imu_mounting(0, 0, 0)) @ np.array([0.0, 0.0, 9.80665])
    assert accel_frd == pytest.approx([0.0, 0.0, -9.80665])


def test_roll_lifting_left_wing_is_positive_in_both():
    # Positive FLU roll turns the left (+y) wing up.
    left_wing = Rotation.from_quat(ros_quaternion(0.3, 0, 0)).apply([0, 1, 0])
    assert left_wing[2] > 0
    assert ned_euler(ros_to_ned_frd(*ros_quaternion(0.3, 0, 0)))[0] == pytest.approx(
        math.degrees(0.3))


def test_nose_down_pitch_is_positive_in_flu_negative_in_frd():
    nose = Rotation.from_quat(ros_quaternion(0, 0.2, 0)).apply([1, 0, 0])
    assert nose[2] < 0
    assert ned_euler(ros_to_ned_frd(*ros_quaternion(0, 0.2, 0)))[1] == pytest.approx(
        -math.degrees(0.2))


def test_counter_clockwise_yaw_rate_is_plus_z_flu_minus_z_frd():
    rate_flu = np.array([0.0, 0.0, 0.5])
    assert flu_to_frd(rate_flu)[2] == -0.5
    # Seen from above (down the ENU -z axis), +z rotation turns x towards y: counter-clockwise.
    assert Rotation.from_rotvec(rate_flu).apply([1, 0, 0])[1] > 0


@settings(max_examples=200, deadline=None)
@given(angle, st.floats(-1.5, 1.5), angle, finite, finite, finite)
def test_orientation_maps_body_vectors_like_scipy(roll, pitch, yaw, vx, vy, vz):
    q_xyzw = ros_quaternion(roll, pitch, yaw)
    body_flu = np.array([vx, vy, vz])
    world_enu = Rotation.from_quat(q_xyzw).apply(body_flu)
    ned_from_frd = quaternion_to_matrix(ros_to_ned_frd(*q_xyzw))
    assert ned_from_frd @ flu_to_frd(body_flu) == pytest.approx(enu_to_ned(world_enu),
                                                                abs=1e-7)


@settings(max_examples=200, deadline=None)
@given(angle, st.floats(-1.5, 1.5), angle)
def test_euler_matches_transforms3d(roll, pitch, yaw):
    q = transforms3d.euler.euler2quat(roll, pitch, yaw, 'sxyz')
    differences = [math.remainder(got - want, math.tau)
                   for got, want in zip(quaternion_to_euler(q), (roll, pitch, yaw))]
    assert differences == pytest.approx([0.0, 0.0, 0.0], abs=1e-7)
    assert rpy_to_matrix(roll, pitch, yaw) == pytest.approx(
        transforms3d.euler.euler2mat(roll, pitch, yaw, 'sxyz'), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(unit, unit, unit, unit)
def test_output_is_unit_and_w_first_non_negative(x, y, z, w):
    if x * x + y * y + z * z + w * w < 1e-6:
        return
    q = ros_to_ned_frd(x, y, z, w)
    assert np.linalg.norm(q) == pytest.approx(1.0)
    assert q[0] >= 0.0


def test_zero_quaternion_is_refused():
    with pytest.raises(ValueError, match='not a rotation'):
        ros_to_ned_frd(0.0, 0.0, 0.0, 0.0)


def test_a_refused_quaternion_is_named_as_received():
    # The message names the ROS x, y, z, w sent, not the NED/FRD product it would become.
    with pytest.raises(ValueError, match=re.escape('x, y, z, w (1e-10, 0.0, 0.0, 0.0)')):
        ros_to_ned_frd(1e-10, 0.0, 0.0, 0.0)


@settings(max_examples=100, deadline=None)
@given(st.tuples(finite, finite, finite).map(np.array), st.floats(0.0, 0.05))
def test_attitude_propagation_matches_scipy(rates, dt):
    rates = rates / 100.0
    start = Rotation.from_euler('xyz', [0.1, -0.2, 0.3])
    q0 = np.roll(start.as_quat(), 1)
    expected = start * Rotation.from_rotvec(rates * dt)
    result = propagate_attitude(q0, rates, dt)
    assert quaternion_to_matrix(result) == pytest.approx(expected.as_matrix(), abs=1e-9)


@pytest.mark.parametrize('rpy,sensor_vector,frd_vector', [
    ((0, 0, 0), (1, 2, 3), (1, -2, -3)),        # REP-103 IMU
    ((180, 0, 0), (1, 2, 3), (1, 2, 3)),        # ardupilot_gazebo: already FRD
    ((0, 0, 90), (1, 0, 0), (0, -1, 0)),        # sensor x points left
])
def test_imu_mounting(rpy, sensor_vector, frd_vector):
    frd = np.array(imu_mounting(*rpy)) @ np.array(sensor_vector, float)
    assert frd == pytest.approx(frd_vector, abs=1e-12)


def test_huge_finite_quaternion_is_normalised_before_use():
    assert ros_to_ned_frd(1e308, 1e308, 0.0, 0.0) == pytest.approx(
        ros_to_ned_frd(1.0, 1.0, 0.0, 0.0))
