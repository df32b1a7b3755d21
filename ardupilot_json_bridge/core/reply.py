"""One SITL reply from one aligned instant, and the apparent wind (windvane) it implies."""

import math
from typing import Tuple

import numpy as np

from ardupilot_json_bridge.core.frames import quaternion_to_matrix
from ardupilot_json_bridge.core.protocol import SensorReply


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
