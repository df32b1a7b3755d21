"""Message conversion with the real ROS 2 message classes of Humble and Jazzy (rosbags)."""

from decimal import Decimal, ROUND_HALF_EVEN
import math

from hypothesis import given, strategies as st
import numpy as np
import pytest

from ardupilot_json_bridge.core.samples import InvalidSample
from ardupilot_json_bridge.messages import inputs
import ros_messages as msgs

STORES = list(msgs.STORES.values())
EAST = (0.0, 0.0, 0.0, 1.0)
NORTH = (0.0, 0.0, math.sin(math.pi / 4), math.cos(math.pi / 4))


@pytest.fixture(params=sorted(msgs.STORES), ids=lambda name: name)
def store(request):
    return msgs.STORES[request.param]


def test_stamp(store):
    assert inputs.stamp_seconds(msgs.header(store, 12.25)) == 12.25


@pytest.mark.parametrize('seconds, parts', [
    (0.0, (0, 0)), (1.5, (1, 500_000_000)),
    (0.9999999999, (1, 0)),            # 0.1 ns from 1 s: carried, nanosec stays below 1e9
    (0.9999999994, (0, 999_999_999)),  # 0.6 ns from 1 s, 0.4 ns from 0.999999999 s
    (-0.25, (-1, 750_000_000)),        # sec + nanosec / 1e9, nanosec unsigned
    (-1e-10, (0, 0)),
    # The float nearest 1700000000.123456789 is 1700000000.12345671653747558...: 123456717 ns.
    (1700000000.123456789, (1_700_000_000, 123_456_717)),
])
def test_time_parts_are_the_nearest_nanosecond(seconds, parts):
    assert inputs.time_parts(seconds) == parts


@given(st.floats(min_value=-1e9, max_value=2e9, allow_nan=False))
def test_time_parts_round_the_exact_value_of_the_float(seconds):
    # Truth from decimal arithmetic on the float's exact value, rounded half to even as
    # Python's round() does.
    nanoseconds = int((Decimal(seconds) * 10**9).to_integral_value(ROUND_HALF_EVEN))
    assert inputs.time_parts(seconds) == divmod(nanoseconds, 10**9)


def test_imu_flu_to_frd(store):
    sample = inputs.imu_to_sample(msgs.imu(store, 3.5, (0.1, 0.2, 0.3), (0.0, 0.0, 9.80665)),
                                  inputs.imu_mounting(0, 0, 0))
    assert sample.stamp == 3.5
    assert sample.gyro == pytest.approx((0.1, -0.2, -0.3))
    assert sample.accel == pytest.approx((0.0, 0.0, -9.80665))


def test_imu_already_frd(store):
    sample = inputs.imu_to_sample(msgs.imu(store, 0.0, (0.1, 0.2, 0.3), (0.0, 0.0, -9.8)),
                                  inputs.imu_mounting(180, 0, 0))
    assert sample.gyro == pytest.approx((0.1, 0.2, 0.3))
    assert sample.accel == pytest.approx((0.0, 0.0, -9.8))


@pytest.mark.parametrize('field', ['angular_velocity', 'linear_acceleration'])
def test_imu_nan_is_refused(store, field):
    message = msgs.imu(store, 0.0, (0.0, 0.0, 0.0), (0.0, 0.0, 9.8))
    getattr(message, field).y = math.nan
    with pytest.raises(InvalidSample, match=field):
        inputs.imu_to_sample(message, inputs.imu_mounting(0, 0, 0))


def test_odometry_facing_north_moving_forward(store):
    message = msgs.odometry(store, 7.0, (10.0, 20.0, 5.0), NORTH, linear=(2.0, 0.5, 0.25),
                            angular=(0.0, 0.0, 0.1))
    sample = inputs.odometry_to_sample(message)
    assert sample.position == pytest.approx((20.0, 10.0, -5.0))
    # Forward is north, left is west, up is up.
    assert sample.velocity == pytest.approx((2.0, -0.5, -0.25))
    assert sample.gyro == pytest.approx((0.0, 0.0, -0.1))
    assert sample.quaternion == pytest.approx((1.0, 0.0, 0.0, 0.0), abs=1e-12)


def test_odometry_facing_east_twist_is_body_frame(store):
    message = msgs.odometry(store, 0.0, (0.0, 0.0, 0.0), EAST, linear=(3.0, 0.0, 0.0))
    sample = inputs.odometry_to_sample(message)
    assert sample.velocity == pytest.approx((0.0, 3.0, 0.0), abs=1e-12)
    assert sample.quaternion == pytest.approx((math.sqrt(0.5), 0, 0, math.sqrt(0.5)))


def test_odometry_world_twist(store):
    message = msgs.odometry(store, 0.0, (0.0, 0.0, 0.0), EAST, linear=(0.0, 3.0, 1.0),
                            angular=(0.0, 0.0, 0.2))
    sample = inputs.odometry_to_sample(message, twist_in_child_frame=False)
    assert sample.velocity == pytest.approx((3.0, 0.0, -1.0))
    assert sample.gyro == pytest.approx((0.0, 0.0, -0.2), abs=1e-12)


def test_finite_values_that_overflow_in_conversion_are_refused(store):
    north_east = (0.0, 0.0, math.sin(math.pi / 8), math.cos(math.pi / 8))
    message = msgs.odometry(store, 0.0, (0, 0, 0), north_east, linear=(1.5e308, 1.5e308, 0.0))
    with pytest.raises(InvalidSample, match='odometry.twist.linear is too large'):
        inputs.odometry_to_sample(message)
    imu_message = msgs.imu(store, 0.0, (1.5e308, 1.5e308, 0.0), (0.0, 0.0, 9.8))
    with pytest.raises(InvalidSample, match='imu.angular_velocity is too large'):
        inputs.imu_to_sample(imu_message, inputs.imu_mounting(0, 0, 45))


def test_odometry_bad_orientation_is_refused(store):
    with pytest.raises(InvalidSample, match='orientation'):
        inputs.odometry_to_sample(msgs.odometry(store, 0.0, (0, 0, 0), (0, 0, 0, 0)))
    with pytest.raises(InvalidSample, match='position'):
        inputs.odometry_to_sample(msgs.odometry(store, 0.0, (math.nan, 0, 0), EAST))


@pytest.mark.parametrize('reading,expected', [
    (2.5, 2.5), (math.inf, 20.0), (-math.inf, 0.0), (math.nan, None), (15.0, 15.0)])
def test_range_rep117(store, reading, expected):
    sample = inputs.range_to_sample(msgs.range_message(store, 1.0, reading, 0.2, 10.0))
    assert sample.value == expected
    assert sample.stamp == 1.0


@pytest.mark.parametrize('ranges,expected', [
    ([5.0, 3.0, 4.0], 3.0),
    ([math.inf, 3.0, 0.05], 3.0),
    ([math.inf, math.inf], 60.0),
    ([31.0, math.nan], 60.0),
    ([0.05, -math.inf], 0.0),
    ([math.nan, math.nan], None),
    ([], None),
])
def test_laser_scan_minimum_valid_ray(store, ranges, expected):
    sample = inputs.laser_scan_to_sample(msgs.laser_scan(store, 1.0, ranges, 0.1, 30.0))
    assert sample.value == (None if expected is None else pytest.approx(expected))


def test_wind_enu_to_ned(store):
    assert inputs.wind_to_sample(msgs.wind(store, 0.0, (1.0, 2.0, 0.5))).value == (
        2.0, 1.0, -0.5)


def test_airspeed_takes_the_receive_stamp(store):
    sample = inputs.airspeed_to_sample(msgs.float64(store, 15.5), 42.0)
    assert (sample.stamp, sample.value) == (42.0, 15.5)
    with pytest.raises(InvalidSample):
        inputs.airspeed_to_sample(msgs.float64(store, math.nan), 0.0)


def test_battery_current_sign(store):
    sample = inputs.battery_to_sample(msgs.battery(store, 2.0, 12.6, -4.5))
    assert sample.value == (12.6, 4.5)
    with pytest.raises(InvalidSample, match='not measured'):
        inputs.battery_to_sample(msgs.battery(store, 2.0, 12.6, math.nan))


def test_joy_to_rc(store):
    sample = inputs.joy_to_rc(msgs.joy(store, 0.0, [0.0, 1.0, -1.0, 0.5, 2.0], [1, 0]))
    assert sample.value == (1500.0, 2000.0, 1000.0, 1750.0, 2000.0, 2000.0, 1000.0)
    many = inputs.joy_to_rc(msgs.joy(store, 0.0, [0.0] * 8, [1] * 8))
    assert len(many.value) == 12
    with pytest.raises(InvalidSample, match='axes'):
        inputs.joy_to_rc(msgs.joy(store, 0.0, [0.0, math.nan], []))


def test_plain_objects_with_ros_field_names_work():
    class Obj:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    stamp = Obj(sec=1, nanosec=500000000)
    message = Obj(header=Obj(stamp=stamp), angular_velocity=Obj(x=0.0, y=0.0, z=1.0),
                  linear_acceleration=Obj(x=0.0, y=0.0, z=9.8))
    sample = inputs.imu_to_sample(message, np.eye(3))
    assert sample.stamp == 1.5 and sample.gyro == (0.0, 0.0, 1.0)
