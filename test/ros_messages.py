"""Real ROS 2 message objects for tests, from the classes rosbags ships per distribution."""

import math
from typing import Any, Sequence

import numpy as np

from ardupilot_json_bridge.sources.bagfile import typestore, write_bag
import ros_motion

STORES = {name: typestore(name) for name in ('humble', 'jazzy')}
# A bridge's clock when a message arrives, and a recorder's log time: its stamp plus this (s).
LATENCY = 0.002


def float32_array(values: Sequence[float]) -> np.ndarray:
    """float32[] fields as ROS stores them: huge values become infinities, silently."""
    with np.errstate(over='ignore'):
        return np.array(values, dtype=np.float32)


def header(store: Any, stamp: float, frame_id: str = 'base_link') -> Any:
    types = store.types
    seconds = math.floor(stamp)
    time = types['builtin_interfaces/msg/Time'](
        sec=int(seconds), nanosec=int(round((stamp - seconds) * 1e9)))
    return types['std_msgs/msg/Header'](stamp=time, frame_id=frame_id)


def clock(store: Any, now: float) -> Any:
    """rosgraph_msgs/Clock at now (s)."""
    return store.types['rosgraph_msgs/msg/Clock'](clock=header(store, now).stamp)


def vector3(store: Any, values: Sequence[float]) -> Any:
    x, y, z = values
    return store.types['geometry_msgs/msg/Vector3'](x=x, y=y, z=z)


def imu(store: Any, stamp: float, gyro: Sequence[float], accel: Sequence[float]) -> Any:
    types = store.types
    return types['sensor_msgs/msg/Imu'](
        header=header(store, stamp),
        orientation=types['geometry_msgs/msg/Quaternion'](x=0.0, y=0.0, z=0.0, w=1.0),
        orientation_covariance=np.zeros(9), angular_velocity=vector3(store, gyro),
        angular_velocity_covariance=np.zeros(9), linear_acceleration=vector3(store, accel),
        linear_acceleration_covariance=np.zeros(9))


def odometry(store: Any, stamp: float, position: Sequence[float], q_xyzw: Sequence[float],
             linear: Sequence[float] = (0.0, 0.0, 0.0),
             angular: Sequence[float] = (0.0, 0.0, 0.0)) -> Any:
    types = store.types
    x, y, z, w = q_xyzw
    px, py, pz = position
    pose = types['geometry_msgs/msg/Pose'](
        position=types['geometry_msgs/msg/Point'](x=px, y=py, z=pz),
        orientation=types['geometry_msgs/msg/Quaternion'](x=x, y=y, z=z, w=w))
    twist = types['geometry_msgs/msg/Twist'](
        linear=vector3(store, linear), angular=vector3(store, angular))
    return types['nav_msgs/msg/Odometry'](
        header=header(store, stamp, 'odom'), child_frame_id='base_link',
        pose=types['geometry_msgs/msg/PoseWithCovariance'](pose=pose, covariance=np.zeros(36)),
        twist=types['geometry_msgs/msg/TwistWithCovariance'](
            twist=twist, covariance=np.zeros(36)))


def range_message(store: Any, stamp: float, distance: float, min_range: float = 0.2,
                  max_range: float = 10.0) -> Any:
    cls = store.types['sensor_msgs/msg/Range']
    fields = dict(header=header(store, stamp), radiation_type=1, field_of_view=0.1,
                  min_range=min_range, max_range=max_range, range=distance)
    if 'variance' in cls.__dataclass_fields__:
        fields['variance'] = 0.0
    return cls(**fields)


def laser_scan(store: Any, stamp: float, ranges: Sequence[float], range_min: float = 0.1,
               range_max: float = 30.0) -> Any:
    return store.types['sensor_msgs/msg/LaserScan'](
        header=header(store, stamp), angle_min=-0.1, angle_max=0.1, angle_increment=0.01,
        time_increment=0.0, scan_time=0.0, range_min=range_min, range_max=range_max,
        ranges=float32_array(ranges), intensities=np.zeros(0, dtype=np.float32))


def wind(store: Any, stamp: float, vector: Sequence[float]) -> Any:
    return store.types['geometry_msgs/msg/Vector3Stamped'](header=header(store, stamp),
                                                           vector=vector3(store, vector))


def battery(store: Any, stamp: float, voltage: float, current: float) -> Any:
    cls = store.types['sensor_msgs/msg/BatteryState']
    values = {name: 0 for name in cls.__dataclass_fields__ if name != '__msgtype__'}
    values.update(header=header(store, stamp), voltage=voltage, current=current,
                  temperature=math.nan, charge=math.nan, capacity=math.nan,
                  design_capacity=math.nan, percentage=math.nan, present=True,
                  cell_voltage=np.zeros(0, dtype=np.float32),
                  cell_temperature=np.zeros(0, dtype=np.float32), location='', serial_number='')
    return cls(**{k: v for k, v in values.items() if k in cls.__dataclass_fields__})


def joy(store: Any, stamp: float, axes: Sequence[float], buttons: Sequence[int]) -> Any:
    return store.types['sensor_msgs/msg/Joy'](
        header=header(store, stamp), axes=float32_array(axes),
        buttons=np.array(buttons, dtype=np.int32))


def float64(store: Any, value: float) -> Any:
    return store.types['std_msgs/msg/Float64'](data=value)


def write_stream_bag(path: Any, stream: ros_motion.Stream, stamp_offset: float = 0.0) -> None:
    """
    Write a ros_motion stream as a recorder would: logged on arrival, /clock at 100 Hz beside it.

    stamp_offset moves the header stamps only, as a simulator stamping on another clock.
    """
    store = STORES['jazzy']
    messages = [('/uav1/imu', 'sensor_msgs/msg/Imu', round((t + LATENCY) * 1e9),
                 imu(store, t + stamp_offset, gyro, accel))
                for t, gyro, accel in ros_motion.imu_samples(stream)]
    messages += [('/uav1/odom', 'nav_msgs/msg/Odometry', round((t + LATENCY) * 1e9),
                  odometry(store, t + stamp_offset, position, orientation, linear))
                 for t, position, orientation, linear in ros_motion.odometry_samples(stream)]
    messages += [('/clock', 'rosgraph_msgs/msg/Clock', round(k / 100 * 1e9),
                  clock(store, k / 100))
                 for k in range(int(stream.seconds * 100))]
    messages.sort(key=lambda m: m[2])
    write_bag(str(path), messages, store)
