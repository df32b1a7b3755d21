"""
ROS sensor messages to samples: works on any object with the ROS field names.

Nothing here imports ROS, so the same functions serve rclpy messages in the node, rosbags
messages in the replay runner and plain objects in tests. Each function converts one message
type from ROS conventions (REP-103, REP-117, REP-145) to ArduPilot's.
"""

import math
from typing import Any, Optional, Tuple

import numpy as np

from ardupilot_json_bridge.core.alignment import rotate
from ardupilot_json_bridge.core.frames import (
    enu_to_ned, FLU_TO_FRD, flu_to_frd, ros_to_ned_frd, rpy_to_matrix)
from ardupilot_json_bridge.core.protocol import Vector3
from ardupilot_json_bridge.core.samples import (
    AirspeedSample, BatterySample, ImuSample, InvalidSample, OdometrySample, RangeSample,
    RcSample, WindSample)

RC_CHANNELS = 12
Matrix3 = Tuple[Vector3, Vector3, Vector3]
RC_CENTRE_US = 1500.0
RC_HALF_RANGE_US = 500.0
NANOSECONDS_PER_SECOND = 1_000_000_000


def time_seconds(time: Any) -> float:
    """Seconds of a builtin_interfaces/Time (a header's stamp, a rosgraph_msgs/Clock's clock)."""
    return time.sec + time.nanosec * 1e-9


def time_parts(seconds: float) -> Tuple[int, int]:
    """
    Return (sec, nanosec) of a builtin_interfaces/Time: the nanosecond nearest to seconds.

    The ROS definition: the time is sec + nanosec / 1e9 with 0 <= nanosec < 1e9. So a fraction
    that rounds to a whole second carries into sec (0.9999999999 s is (1, 0)), and a time
    before zero has a positive nanosec (-0.25 s is (-1, 750000000)). The fraction is split off
    before it is scaled: seconds * 1e9 would lose nanoseconds of wall-clock times (1.7e9 s).
    """
    whole = math.floor(seconds)
    carry, nanoseconds = divmod(round((seconds - whole) * 1e9), NANOSECONDS_PER_SECOND)
    return int(whole) + carry, nanoseconds


def stamp_seconds(header: Any) -> float:
    """Seconds of a std_msgs/Header's builtin_interfaces/Time stamp."""
    return time_seconds(header.stamp)


def imu_mounting(roll_deg: float, pitch_deg: float, yaw_deg: float) -> Matrix3:
    """
    Matrix (rows of plain floats) taking IMU-sensor vectors to FRD body vectors.

    The angles give the sensor frame's orientation in the FLU body frame: zeros for a REP-103
    FLU IMU, (180, 0, 0) for ardupilot_gazebo's IMU, which reads FRD already.
    """
    flu_from_sensor = rpy_to_matrix(*np.radians([roll_deg, pitch_deg, yaw_deg]))
    return tuple(tuple(float(v) for v in row) for row in FLU_TO_FRD @ flu_from_sensor)


# The per-sample conversions below use plain floats: at 1 kHz, numpy's overhead on 3-vectors
# costs ten times the arithmetic.

def _finite3(name: str, msg: Any) -> Vector3:
    x, y, z = float(msg.x), float(msg.y), float(msg.z)
    if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
        raise InvalidSample(f'{name} is not finite: {(x, y, z)}')
    return x, y, z


def _checked(name: str, source: Vector3, result: Vector3) -> Vector3:
    """Return result (source converted), refused where finite input overflowed in the change."""
    if not all(map(math.isfinite, result)):
        raise InvalidSample(f'{name} is too large to convert: {source}')
    return result


def _transformed(name: str, matrix: Matrix3, vector: Vector3) -> Vector3:
    x, y, z = vector
    (a, b, c), (d, e, f), (g, h, i) = matrix
    return _checked(name, vector, (a * x + b * y + c * z, d * x + e * y + f * z,
                                   g * x + h * y + i * z))


def imu_to_sample(msg: Any, mounting: Matrix3) -> ImuSample:
    """
    sensor_msgs/Imu to body rates and specific force in FRD (orientation is not used).

    mounting is imu_mounting's matrix.
    """
    gyro = _transformed('imu.angular_velocity', mounting,
                        _finite3('imu.angular_velocity', msg.angular_velocity))
    accel = _transformed('imu.linear_acceleration', mounting,
                         _finite3('imu.linear_acceleration', msg.linear_acceleration))
    return ImuSample(stamp=stamp_seconds(msg.header), gyro=gyro, accel=accel)


def odometry_to_sample(msg: Any, twist_in_child_frame: bool = True) -> OdometrySample:
    """
    nav_msgs/Odometry (ENU pose, FLU body twist) to NED position, velocity and attitude.

    nav_msgs/Odometry gives the twist in the child (body) frame; some engines publish it in
    the world frame instead, which twist_in_child_frame=False accepts.
    """
    pose = msg.pose.pose
    position = _finite3('odometry.pose.position', pose.position)
    o = pose.orientation
    orientation = (float(o.x), float(o.y), float(o.z), float(o.w))
    if not all(map(math.isfinite, orientation)):
        raise InvalidSample(f'odometry.pose.orientation is not finite: {orientation}')
    try:
        quaternion = ros_to_ned_frd(*orientation)
    except ValueError as error:
        raise InvalidSample(f'odometry.pose.orientation: {error}') from None
    linear = _finite3('odometry.twist.linear', msg.twist.twist.linear)
    angular = _finite3('odometry.twist.angular', msg.twist.twist.angular)
    if twist_in_child_frame:
        velocity = rotate(quaternion, flu_to_frd(linear))
        gyro = flu_to_frd(angular)
    else:
        w, x, y, z = quaternion
        velocity = enu_to_ned(linear)
        gyro = rotate((w, -x, -y, -z), enu_to_ned(angular))
    return OdometrySample(
        stamp=stamp_seconds(msg.header), position=enu_to_ned(position),
        velocity=_checked('odometry.twist.linear', linear, velocity), quaternion=quaternion,
        gyro=_checked('odometry.twist.angular', angular, gyro))


def _distance(reading: float, min_range: float, max_range: float) -> Optional[float]:
    """
    One REP-117 reading as the distance SITL should see, or None for no reading.

    +Inf (nothing within range) reads as twice the maximum, as ardupilot_gazebo reports a
    missing return, so ArduPilot flags it out of range high; -Inf (too close) reads as 0,
    out of range low; NaN (invalid) is no reading at all.
    """
    if math.isnan(reading):
        return None
    if reading == math.inf:
        return 2.0 * max_range if math.isfinite(max_range) else None
    if reading == -math.inf:
        return 0.0
    return float(reading)


def range_to_sample(msg: Any) -> RangeSample:
    """sensor_msgs/Range to a distance in metres (REP-117 infinities handled, see _distance)."""
    return RangeSample(stamp=stamp_seconds(msg.header),
                       value=_distance(msg.range, msg.min_range, msg.max_range))


def laser_scan_to_sample(msg: Any) -> RangeSample:
    """
    sensor_msgs/LaserScan to its minimum valid ray, as a rangefinder distance.

    A ray is valid within [range_min, range_max]. With none valid, a ray past the maximum
    (or +Inf) reads as no return, one below the minimum (or -Inf) as too close; all NaN is no
    reading.
    """
    ranges = np.asarray(msg.ranges, dtype=float)
    lower, upper = float(msg.range_min), float(msg.range_max)
    valid = ranges[(ranges >= lower) & (ranges <= upper)]
    if valid.size:
        value = float(valid.min())
    elif np.any(ranges > upper):
        value = _distance(math.inf, lower, upper)
    elif np.any(ranges < lower):
        value = _distance(-math.inf, lower, upper)
    else:
        value = None
    return RangeSample(stamp=stamp_seconds(msg.header), value=value)


def wind_to_sample(msg: Any) -> WindSample:
    """geometry_msgs/Vector3Stamped: the air's velocity in the ENU world, to NED."""
    return WindSample(stamp=stamp_seconds(msg.header),
                      value=enu_to_ned(_finite3('wind.vector', msg.vector)))


def airspeed_to_sample(msg: Any, stamp: float) -> AirspeedSample:
    """std_msgs/Float64 airspeed in m/s; it has no header, so the receiver supplies the stamp."""
    value = float(msg.data)
    if not math.isfinite(value):
        raise InvalidSample(f'airspeed is not finite: {value}')
    return AirspeedSample(stamp=stamp, value=value)


def battery_to_sample(msg: Any) -> BatterySample:
    """sensor_msgs/BatteryState to (voltage, current); ROS current is negative discharging."""
    voltage, current = float(msg.voltage), -float(msg.current)
    if not (math.isfinite(voltage) and math.isfinite(current)):
        raise InvalidSample(f'battery voltage/current not measured: {voltage}, {-current}')
    return BatterySample(stamp=stamp_seconds(msg.header), value=(voltage, current))


def joy_to_rc(msg: Any) -> RcSample:
    """
    sensor_msgs/Joy to RC PWM: axes first (-1..1 to 1000..2000 us), then buttons.

    A pressed button reads 2000 us, released 1000 us; RC channels past the axes and buttons
    the joystick has are left out.
    """
    axes = [float(a) for a in msg.axes]
    if not all(map(math.isfinite, axes)):
        raise InvalidSample(f'joy axes are not finite: {axes}')
    channels = [RC_CENTRE_US + RC_HALF_RANGE_US * max(-1.0, min(1.0, a)) for a in axes]
    channels += [RC_CENTRE_US + RC_HALF_RANGE_US * (1.0 if b else -1.0) for b in msg.buttons]
    return RcSample(stamp=stamp_seconds(msg.header), value=tuple(channels[:RC_CHANNELS]))
