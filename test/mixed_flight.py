"""
Flights whose PWM a mixer computed for a layout, flown by a vehicle of another: the truth.

Independent of the package: a rigid body integrated here with scipy's rotations, an attitude
controller and a mixer written from ArduPilot's tables (libraries/AP_Motors/
AP_MotorsMatrix.cpp, setup_motors, MOTOR_FRAME_QUAD: add_motor(n, angle, yaw factor) gives
roll factor cos(angle + 90 deg), pitch factor cos(angle); CCW is +1, CW -1), a plane's roll
axis and a rover's steering. Samples come out as a ROS simulator publishes them (FLU body,
ENU world) with the PWM SITL sent each frame.
"""

from dataclasses import dataclass
import math
from typing import Dict, List, Sequence, Tuple

import numpy as np
from scipy.spatial.transform import Rotation

GRAVITY = 9.80665
FRAME_RATE = 1200.0
ODOMETRY_EVERY = 4
# Motor angles from the nose (deg, clockwise seen from above) and spin (+1 CCW, -1 CW), in
# SERVO order, from AP_MotorsMatrix.cpp's QUAD cases.
QUADS: Dict[str, Tuple[Tuple[float, float], ...]] = {
    'PLUS': ((90.0, 1.0), (-90.0, 1.0), (0.0, -1.0), (180.0, -1.0)),
    'X': ((45.0, 1.0), (-135.0, 1.0), (-45.0, -1.0), (135.0, -1.0)),
    'H': ((45.0, -1.0), (-135.0, -1.0), (-45.0, 1.0), (135.0, 1.0)),
}
# The vehicle: mass (kg), inertia (kg m^2, FRD diagonal), arm (m), thrust per motor at full
# command (N), yaw torque per newton of thrust (m), motor time constant (s).
MASS = 1.5
INERTIA = np.array([0.015, 0.015, 0.025])
ARM = 0.25
MAX_THRUST = 9.0
YAW_PER_THRUST = 0.016
MOTOR_LAG = 0.03


@dataclass(frozen=True)
class Flight:
    """A hover with attitude steps: the airframe's layout and the mixer's."""

    frame: str = 'X'
    mixer: str = 'X'
    seconds: float = 10.0
    seed: int = 1
    gust: float = 0.05


@dataclass
class Record:
    """What a recording holds: IMU, odometry and PWM rows, stamps first."""

    imu: List[Tuple[float, Sequence[float], Sequence[float]]]
    odometry: List[Tuple[float, Sequence[float], Sequence[float], Sequence[float]]]
    pwm: List[Tuple[float, Sequence[int]]]


def _factors(layout: str) -> np.ndarray:
    """Return (4, 3) roll, pitch, yaw factors of a QUAD layout, ArduPilot's add_motor."""
    return np.array([[math.cos(math.radians(a + 90.0)), math.cos(math.radians(a)), spin]
                     for a, spin in QUADS[layout]])


def _pwm(commands: np.ndarray) -> List[int]:
    outputs = [int(round(1000.0 + 1000.0 * min(max(c, 0.0), 1.0))) for c in commands]
    return outputs + [0] * (16 - len(outputs))


def fly_quad(flight: Flight) -> Record:
    """Fly a hover with attitude steps and gusts; SITL's mixer is flight.mixer's layout."""
    rng = np.random.default_rng(flight.seed)
    dt = 1.0 / FRAME_RATE
    geometry = _factors(flight.frame)
    mixer = _factors(flight.mixer)
    hover = MASS * GRAVITY / (4 * MAX_THRUST)
    motors = np.full(4, hover)
    rotation, rates = Rotation.identity(), np.zeros(3)   # FRD body to NED world, FRD rates
    position, velocity = np.zeros(3), np.zeros(3)        # NED
    integral, gust = np.zeros(3), np.zeros(3)
    target = np.zeros(3)
    record = Record([], [], [])
    for k in range(int(flight.seconds * FRAME_RATE)):
        t = k * dt
        if k % int(1.5 * FRAME_RATE) == 0:
            target = np.array([rng.uniform(-0.2, 0.2), rng.uniform(-0.2, 0.2), 0.0])
        roll, pitch, yaw = rotation.as_euler('ZYX')[::-1]
        angle_error = target - np.array([roll, pitch, 0.0])
        rate_target = 4.5 * angle_error + np.array([0.0, 0.0, 0.3 * math.sin(0.7 * t)])
        error = rate_target - rates
        integral = np.clip(integral + error * dt, -0.5, 0.5)
        demand = np.array([0.03, 0.03, 0.3]) * error + 0.02 * integral
        # Down is positive in NED: sinking or below the start asks for more thrust.
        throttle = hover + 0.1 * velocity[2] + 0.05 * position[2]
        commands = np.clip(throttle + mixer @ demand, 0.0, 1.0)
        pwm = _pwm(commands)
        applied = (np.array(pwm[:4]) - 1000.0) / 1000.0
        motors += (applied - motors) * dt / MOTOR_LAG
        thrust = MAX_THRUST * motors
        gust += (rng.normal(0.0, flight.gust, 3) - gust) * dt / 0.2
        torque = (np.array([ARM * geometry[:, 0] @ thrust, ARM * geometry[:, 1] @ thrust,
                            YAW_PER_THRUST * geometry[:, 2] @ thrust]) + gust)
        accel_body = (torque - np.cross(rates, INERTIA * rates)) / INERTIA
        force_body = np.array([0.0, 0.0, -thrust.sum()]) - 0.3 * rotation.inv().apply(velocity)
        acceleration = rotation.apply(force_body) / MASS + np.array([0.0, 0.0, GRAVITY])
        rates = rates + accel_body * dt
        rotation = rotation * Rotation.from_rotvec(rates * dt)
        velocity = velocity + acceleration * dt
        position = position + velocity * dt
        _publish(record, t + dt, rotation, rates, position, velocity,
                 force_body / MASS, pwm, rng, k)
    return record


NED_FROM_ENU = Rotation.from_matrix([[0, 1, 0], [1, 0, 0], [0, 0, -1]])
FLU_FROM_FRD = Rotation.from_euler('x', math.pi)


def _publish(record: Record, t: float, rotation: Rotation, rates: np.ndarray,
             position: np.ndarray, velocity: np.ndarray, specific_force: np.ndarray,
             pwm: Sequence[int], rng: np.random.Generator, frame: int) -> None:
    """Append one frame in ROS conventions: FLU body in an ENU world."""
    flip = np.array([1.0, -1.0, -1.0])
    gyro = rates * flip + rng.normal(0.0, 0.003, 3)
    accel = specific_force * flip + rng.normal(0.0, 0.03, 3)
    record.imu.append((t, tuple(gyro), tuple(accel)))
    record.pwm.append((t, tuple(pwm)))
    if frame % ODOMETRY_EVERY == 0:
        enu_flu = NED_FROM_ENU.inv() * rotation * FLU_FROM_FRD
        x, y, z, w = enu_flu.as_quat()
        record.odometry.append((t, tuple(NED_FROM_ENU.inv().apply(position)), (x, y, z, w),
                                tuple(enu_flu.inv().apply(NED_FROM_ENU.inv().apply(velocity)))))


def _ground_frame(record: Record, t: float, rotation: Rotation, rates_flu: np.ndarray,
                  position: np.ndarray, velocity: np.ndarray, acceleration: np.ndarray,
                  pwm: Sequence[int], rng: np.random.Generator, frame: int) -> None:
    """Append one frame given in ROS conventions already (FLU body in ENU)."""
    specific_force = rotation.inv().apply(acceleration + np.array([0.0, 0.0, GRAVITY]))
    record.imu.append((t, tuple(rates_flu + rng.normal(0.0, 0.003, 3)),
                       tuple(specific_force + rng.normal(0.0, 0.03, 3))))
    record.pwm.append((t, tuple(pwm)))
    if frame % ODOMETRY_EVERY == 0:
        record.odometry.append((t, tuple(position), tuple(rotation.as_quat()),
                                tuple(rotation.inv().apply(velocity))))


# A plane's roll axis: aileron authority (rad/s^2 at full deflection) and roll damping (1/s).
ROLL_AUTHORITY = 20.0
ROLL_DAMPING = 5.0
CRUISE = 15.0


def fly_plane(reversed_aileron: bool = False, seconds: float = 10.0, seed: int = 1) -> Record:
    """
    Fly a plane level at CRUISE m/s east while ArduPlane's roll loop steps its bank.

    SERVO1 is the aileron: higher PWM rolls right (positive roll), unless the airframe's
    aileron is reversed.
    """
    rng = np.random.default_rng(seed)
    dt = 1.0 / FRAME_RATE
    sign = -1.0 if reversed_aileron else 1.0
    roll, rate, target, gust = 0.0, 0.0, 0.0, 0.0
    record = Record([], [], [])
    for k in range(int(seconds * FRAME_RATE)):
        t = k * dt
        if k % int(2.0 * FRAME_RATE) == 0:
            target = rng.uniform(-0.5, 0.5)
        error = math.remainder(target - roll, 2 * math.pi)
        demand = min(max(1.5 * error - 0.3 * rate, -1.0), 1.0)
        pwm = [int(round(1500 + 500 * demand)), 1500, 1600, 1500] + [0] * 12
        aileron = sign * (pwm[0] - 1500) / 500.0
        gust += (rng.normal(0.0, 20.0) - gust) * dt / 0.2
        rate += (ROLL_AUTHORITY * aileron - ROLL_DAMPING * rate + gust) * dt
        roll += rate * dt
        # FRD roll right is FLU roll about +x the same way; heading east in ENU.
        rotation = Rotation.from_euler('x', roll)
        velocity = np.array([CRUISE, 0.0, 0.0])
        _ground_frame(record, t + dt, rotation, np.array([rate, 0.0, 0.0]),
                      velocity * (t + dt), velocity, np.zeros(3), pwm, rng, k)
    return record


# A rover: wheelbase (m), steering lock (rad) at full PWM, cruise speed (m/s).
WHEELBASE = 0.5
STEER_LOCK = 0.5
ROVER_SPEED = 2.0


def drive_rover(reversed_steering: bool = False, seconds: float = 12.0,
                seed: int = 1) -> Record:
    """
    Drive a bicycle-model rover after changing headings, forward then a stretch in reverse.

    SERVO1 steers: higher PWM turns right (the heading falls in ENU) going forward, unless
    the rover's steering is reversed. SERVO3 is the throttle.
    """
    rng = np.random.default_rng(seed)
    dt = 1.0 / FRAME_RATE
    sign = -1.0 if reversed_steering else 1.0
    heading, target = 0.0, 0.0
    position = np.zeros(3)
    speed = 0.0
    record = Record([], [], [])
    for k in range(int(seconds * FRAME_RATE)):
        t = k * dt
        if k % int(2.5 * FRAME_RATE) == 0:
            target = heading + rng.uniform(-1.0, 1.0)
        wanted = -1.0 if 0.6 * seconds < t < 0.8 * seconds else ROVER_SPEED
        error = math.remainder(target - heading, 2 * math.pi) * (1 if wanted > 0 else -1)
        # More PWM steers right: a heading to gain (left) asks for less.
        steer = min(max(-1.2 * error, -1.0), 1.0)
        pwm = [int(round(1500 + 500 * steer)), 0, int(round(1500 + 200 * wanted)), 0] + [0] * 12
        accel = min(max(2.0 * (wanted - speed), -3.0), 3.0)
        speed += accel * dt
        yaw_rate = -speed * math.tan(sign * STEER_LOCK * (pwm[0] - 1500) / 500.0) / WHEELBASE
        heading += yaw_rate * dt
        forward = np.array([math.cos(heading), math.sin(heading), 0.0])
        left = np.array([-math.sin(heading), math.cos(heading), 0.0])
        position = position + speed * forward * dt
        _ground_frame(record, t + dt, Rotation.from_euler('z', heading),
                      np.array([0.0, 0.0, yaw_rate]), position, speed * forward,
                      accel * forward + speed * yaw_rate * left, pwm, rng, k)
    return record
