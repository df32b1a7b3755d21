"""
IMU and odometry messages as rosbags objects, from plain numbers: the sample bags' content.

In ROS conventions (REP-103: ENU world, FLU body, quaternions x, y, z, w).
"""

from typing import Any, Sequence

import numpy as np

from ardupilot_json_bridge.messages.inputs import time_parts
from ardupilot_json_bridge.messages.routes import IMU_TYPE, ODOMETRY_TYPE

Vector = Sequence[float]


def time_message(store: Any, t: float) -> Any:
    """builtin_interfaces/Time of t seconds (nanoseconds rounded, carried into seconds)."""
    seconds, nanoseconds = time_parts(t)
    return store.types['builtin_interfaces/msg/Time'](sec=seconds, nanosec=nanoseconds)


def _header(store: Any, stamp: float, frame_id: str) -> Any:
    return store.types['std_msgs/msg/Header'](stamp=time_message(store, stamp),
                                              frame_id=frame_id)


def _vector(store: Any, values: Vector) -> Any:
    x, y, z = (float(v) for v in values)
    return store.types['geometry_msgs/msg/Vector3'](x=x, y=y, z=z)


def _quaternion(store: Any, xyzw: Vector) -> Any:
    x, y, z, w = (float(v) for v in xyzw)
    return store.types['geometry_msgs/msg/Quaternion'](x=x, y=y, z=z, w=w)


def imu_message(store: Any, stamp: float, orientation: Vector, body_rates: Vector,
                specific_force: Vector, frame_id: str = 'imu_link') -> Any:
    """sensor_msgs/Imu: orientation x, y, z, w in ENU; rates and specific force in FLU."""
    return store.types[IMU_TYPE](
        header=_header(store, stamp, frame_id), orientation=_quaternion(store, orientation),
        orientation_covariance=np.zeros(9), angular_velocity=_vector(store, body_rates),
        angular_velocity_covariance=np.zeros(9),
        linear_acceleration=_vector(store, specific_force),
        linear_acceleration_covariance=np.zeros(9))


def odometry_message(store: Any, stamp: float, position: Vector, orientation: Vector,
                     body_velocity: Vector, body_rates: Vector, frame_id: str = 'odom',
                     child_frame_id: str = 'base_link') -> Any:
    """nav_msgs/Odometry: ENU pose; the twist in the body (child) frame, as REP-105 says."""
    types = store.types
    x, y, z = (float(v) for v in position)
    point = types['geometry_msgs/msg/Point'](x=x, y=y, z=z)
    pose = types['geometry_msgs/msg/Pose'](position=point,
                                           orientation=_quaternion(store, orientation))
    twist = types['geometry_msgs/msg/Twist'](linear=_vector(store, body_velocity),
                                             angular=_vector(store, body_rates))
    return types[ODOMETRY_TYPE](
        header=_header(store, stamp, frame_id), child_frame_id=child_frame_id,
        pose=types['geometry_msgs/msg/PoseWithCovariance'](pose=pose, covariance=np.zeros(36)),
        twist=types['geometry_msgs/msg/TwistWithCovariance'](twist=twist,
                                                             covariance=np.zeros(36)))
