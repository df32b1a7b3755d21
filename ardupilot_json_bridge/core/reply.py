"""One SITL reply from one instant, and the derived values some simulators do not publish."""

import math
from typing import Tuple

import numpy as np

from ardupilot_json_bridge.core.alignment import History, rotate
from ardupilot_json_bridge.core.frames import quaternion_to_matrix, STANDARD_GRAVITY
from ardupilot_json_bridge.core.protocol import SensorReply
from ardupilot_json_bridge.core.samples import ImuSample, OdometrySample

# Odometry-only mode differentiates velocity over at least this long, so stamp jitter does
# not become acceleration spikes.
MIN_DIFFERENCE_SPAN = 0.004


def imu_from_odometry(history: 'History[OdometrySample]',
                      current: OdometrySample) -> ImuSample:
    """
    Gyro and specific force for engines without an IMU, from successive odometry.

    Body rates come from the odometry twist. Specific force is the velocity's difference
    against the newest earlier sample at least MIN_DIFFERENCE_SPAN older, less gravity, in
    the body frame (level at rest: [0, 0, -g]); with no such sample, gravity alone.
    """
    accel_ned = (0.0, 0.0, 0.0)
    if len(history):
        previous, _ = history.around(current.stamp - MIN_DIFFERENCE_SPAN)
        if previous is not None and current.stamp > previous.stamp:
            dt = current.stamp - previous.stamp
            accel_ned = tuple((c - p) / dt for c, p in zip(current.velocity, previous.velocity))
    w, x, y, z = current.quaternion
    force_ned = (accel_ned[0], accel_ned[1], accel_ned[2] - STANDARD_GRAVITY)
    specific_force = rotate((w, -x, -y, -z), force_ned)
    return ImuSample(stamp=current.stamp, gyro=current.gyro, accel=specific_force)


def windvane(wind_ned: Tuple[float, float, float], velocity_ned: Tuple[float, float, float],
             quaternion: Tuple[float, float, float, float]) -> Tuple[float, float]:
    """
    Apparent wind: direction (rad clockwise from the nose, 0 head to wind) and speed.

    Values too large to combine give NaN, which the encoder leaves out of the reply.
    """
    with np.errstate(over='ignore', invalid='ignore'):
        air_ned = np.subtract(wind_ned, velocity_ned)
        air_body = quaternion_to_matrix(quaternion).T @ air_ned
    direction = math.atan2(-air_body[1], -air_body[0])
    return direction, math.hypot(air_body[0], air_body[1])


def build_reply(instant, timestamp: float, no_time_sync: bool = False,
                no_lockstep: bool = False) -> SensorReply:
    """Return the reply for one aligned instant at SITL session time timestamp."""
    wind = instant.wind
    return SensorReply(
        timestamp=timestamp, gyro=instant.gyro, accel_body=instant.accel,
        position=instant.position, velocity=instant.velocity, quaternion=instant.quaternion,
        rangefinders=instant.ranges, velocity_wind=wind,
        windvane=None if wind is None else windvane(wind, instant.velocity,
                                                    instant.quaternion),
        airspeed=instant.airspeed, battery=instant.battery,
        rc=() if instant.rc is None else instant.rc,
        no_time_sync=no_time_sync, no_lockstep=no_lockstep)
