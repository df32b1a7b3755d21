"""
Synthetic simulator bags: a vehicle in steady motion, as Gazebo would publish it.

Makes the sample bag shipped with the package (a vehicle resting on the ground, so that
`ardupilot-json-bridge replay` links up with SITL with nothing else installed) and the bags
the tests replay. Run as a module to write the sample again.
"""

from dataclasses import dataclass
import math
import os
from typing import Any, Iterator, Tuple

import numpy as np

from ardupilot_json_bridge.core.frames import STANDARD_GRAVITY
from ardupilot_json_bridge.messages.routes import IMU_TYPE, ODOMETRY_TYPE
from ardupilot_json_bridge.sources.bag_messages import imu_message, odometry_message
from ardupilot_json_bridge.sources.bagfile import typestore, write_bag

SAMPLE_BAG = os.path.join(os.path.dirname(__file__), 'data', 'resting_vehicle')


@dataclass(frozen=True)
class SteadyMotion:
    """
    Level flight (or rest) in ENU: constant world velocity and yaw rate, REP-103 body.

    yaw is measured from east, counter-clockwise, as in ROS.
    """

    position: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    velocity: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    yaw: float = math.pi / 2
    yaw_rate: float = 0.0

    def pose(self, t: float) -> Tuple[np.ndarray, float]:
        return np.add(self.position, np.multiply(self.velocity, t)), self.yaw + self.yaw_rate * t

    def body_velocity(self, yaw: float) -> Tuple[float, float, float]:
        """World velocity in the FLU body frame of a level vehicle at yaw."""
        vx, vy, vz = self.velocity
        c, s = math.cos(yaw), math.sin(yaw)
        return c * vx + s * vy, -s * vx + c * vy, vz


def _yaw_quaternion(yaw: float) -> Tuple[float, float, float, float]:
    return 0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)


def motion_imu_message(store: Any, motion: SteadyMotion, t: float, stamp: float) -> Any:
    """Return what a level FLU IMU reads at motion time t: yaw rate, gravity's reaction."""
    return imu_message(store, stamp, _yaw_quaternion(motion.pose(t)[1]),
                       (0.0, 0.0, motion.yaw_rate), (0.0, 0.0, STANDARD_GRAVITY))


def motion_odometry_message(store: Any, motion: SteadyMotion, t: float, stamp: float) -> Any:
    """nav_msgs/Odometry of the motion at time t: ENU pose, twist in the body (child) frame."""
    position, yaw = motion.pose(t)
    return odometry_message(store, stamp, position, _yaw_quaternion(yaw),
                            motion.body_velocity(yaw), (0.0, 0.0, motion.yaw_rate))


def motion_messages(store: Any, motion: SteadyMotion, duration: float, imu_rate: float,
                    odometry_rate: float, namespace: str = '', start: float = 0.0,
                    imu_first: bool = False, odometry_delay: float = 0.0
                    ) -> Iterator[Tuple[str, str, int, Any]]:
    """
    (topic, type, log time ns, message) of IMU and odometry over duration, in log order.

    Odometry is logged odometry_delay after its stamp; at equal log times odometry comes
    first unless imu_first.
    """
    prefix = '/' + namespace.strip('/') + '/' if namespace.strip('/') else '/'
    events = [(i / imu_rate, 0.0, 'imu') for i in range(int(round(duration * imu_rate)))]
    events += [(i / odometry_rate, odometry_delay, 'odom')
               for i in range(int(round(duration * odometry_rate)))]

    def log_order(event: Tuple[float, float, str]) -> Tuple[float, bool]:
        return event[0] + event[1], (event[2] == 'imu') != imu_first

    for t, delay, kind in sorted(events, key=log_order):
        stamp = start + t
        log_time = int(round((stamp + delay) * 1e9))
        if kind == 'imu':
            yield prefix + 'imu', IMU_TYPE, log_time, motion_imu_message(
                store, motion, t, stamp)
        else:
            yield prefix + 'odom', ODOMETRY_TYPE, log_time, motion_odometry_message(
                store, motion, t, stamp)


def write_motion_bag(path: str, motion: SteadyMotion, duration: float, imu_rate: float = 400.0,
                     odometry_rate: float = 50.0, namespace: str = '', start: float = 0.0,
                     storage: str = 'sqlite3', distribution: str = 'humble',
                     compress: bool = False, imu_first: bool = False,
                     odometry_delay: float = 0.0) -> None:
    """Write a bag of the motion's IMU and odometry topics."""
    store = typestore(distribution)
    write_bag(path, motion_messages(store, motion, duration, imu_rate, odometry_rate,
                                    namespace, start, imu_first, odometry_delay),
              store, storage, compress)


def main() -> None:
    """
    Write the shipped sample: 2 s at rest, facing north, on the ground at the origin.

    IMU at 1200 Hz, SITL's default physics rate: Copter needs physics well above its 400 Hz
    loop.
    """
    import shutil
    shutil.rmtree(SAMPLE_BAG, ignore_errors=True)
    write_motion_bag(SAMPLE_BAG, SteadyMotion(), duration=2.0, imu_rate=1200.0,
                     compress=True)
    print(f'wrote {SAMPLE_BAG}')


if __name__ == '__main__':
    main()
