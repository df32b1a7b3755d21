"""
Stamped samples in ArduPilot conventions: what sources push and the state holds.

Stamps are the source's physics time in seconds (ROS header stamps, bag stamps, a simulator's
clock); the state turns them into SITL session time.
"""

from dataclasses import dataclass
from typing import Generic, Optional, Tuple, TypeVar

from ardupilot_json_bridge.core.protocol import Quaternion, Vector3

T = TypeVar('T')


class InvalidSample(ValueError):
    """A message that cannot become a sample; the text names the field and the value."""


@dataclass(frozen=True)
class ImuSample:
    """Body rates (rad/s) and specific force (m/s^2), both in the FRD body frame."""

    stamp: float
    gyro: Vector3
    accel: Vector3


@dataclass(frozen=True)
class OdometrySample:
    """
    Pose and rates of the body: NED position (m) and velocity (m/s), FRD gyro (rad/s).

    quaternion is w-first and rotates FRD body vectors into NED.
    """

    stamp: float
    position: Vector3
    velocity: Vector3
    quaternion: Quaternion
    gyro: Vector3


@dataclass(frozen=True)
class Stamped(Generic[T]):
    """An optional input's value at a physics time (rangefinder, wind, airspeed, ...)."""

    stamp: float
    value: T


RangeSample = Stamped[Optional[float]]
WindSample = Stamped[Vector3]
AirspeedSample = Stamped[float]
BatterySample = Stamped[Tuple[float, float]]
RcSample = Stamped[Tuple[float, ...]]
