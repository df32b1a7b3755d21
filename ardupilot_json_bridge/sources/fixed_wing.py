"""
Fixed-wing aerodynamics for the MuJoCo engine: lift, drag, side force and moments each step.

MuJoCo has no wings. This is the model ArduPilot's own SITL plane uses
(libraries/SITL/SIM_Plane.cpp: liftCoeff, dragCoeff, getForce and getTorque, "from last_letter
https://github.com/Georacer/last_letter aerodynamicsLib.cpp"), with its coefficient set
(SIM_Plane.h, "from last_letter skywalker_2013/aerodynamics.yaml"): lift linear in the angle
of attack below the stall, blended by a sigmoid into a flat plate's beyond it; drag parasitic
plus induced; side force, roll, pitch and yaw moments from sideslip, body rates and the
surfaces. As in SIM_Plane the surfaces enter as deflections normalised to their maximum
(-1 to 1), and the coefficients come from the model: <custom> numerics named aero_<name>.
Body axes here are FRD, as SIM_Plane's; the engine converts to and from MuJoCo's FLU.
"""

from dataclasses import dataclass, fields
import math
from typing import Callable, Tuple

import numpy as np

AIR_DENSITY = 1.225      # kg/m^3, ISA sea level, as SIM_Plane
# Below this airspeed (m/s) the aerodynamic terms are left out, as SIM_Plane does at zero.
MIN_AIRSPEED = 0.1
# SIM_Plane clamps alpha to alpha_stall +- this before the sigmoid, so exp() cannot overflow.
MAX_ALPHA_DELTA = 0.8


@dataclass(frozen=True)
class Coefficients:
    """SIM_Plane's coefficient set, by its names (areas m^2, lengths m, angles rad)."""

    s: float
    b: float
    c: float
    c_lift_0: float
    c_lift_deltae: float
    c_lift_a: float
    c_lift_q: float
    mcoeff: float
    oswald: float
    alpha_stall: float
    c_drag_q: float
    c_drag_deltae: float
    c_drag_p: float
    c_y_0: float
    c_y_b: float
    c_y_p: float
    c_y_r: float
    c_y_deltaa: float
    c_y_deltar: float
    c_l_0: float
    c_l_p: float
    c_l_b: float
    c_l_r: float
    c_l_deltaa: float
    c_l_deltar: float
    c_m_0: float
    c_m_a: float
    c_m_q: float
    c_m_deltae: float
    c_n_0: float
    c_n_b: float
    c_n_p: float
    c_n_r: float
    c_n_deltaa: float
    c_n_deltar: float
    deltaa_max: float
    deltae_max: float
    deltar_max: float

    @classmethod
    def read(cls, numeric: Callable[[str], float]) -> 'Coefficients':
        """Read every coefficient from the model's aero_<name> numerics."""
        return cls(**{f.name: numeric(f'aero_{f.name}') for f in fields(cls)})


def lift_coefficient(k: Coefficients, alpha: float) -> float:
    """Return SIM_Plane's liftCoeff: linear below the stall, a flat plate beyond it."""
    alpha0, m = k.alpha_stall, k.mcoeff
    alpha = min(max(alpha, alpha0 - MAX_ALPHA_DELTA), alpha0 + MAX_ALPHA_DELTA)
    sigmoid = ((1 + math.exp(-m * (alpha - alpha0)) + math.exp(m * (alpha + alpha0)))
               / (1 + math.exp(-m * (alpha - alpha0))) / (1 + math.exp(m * (alpha + alpha0))))
    linear = (1.0 - sigmoid) * (k.c_lift_0 + k.c_lift_a * alpha)
    flat_plate = sigmoid * 2 * math.copysign(1, alpha) * math.sin(alpha) ** 2 * math.cos(alpha)
    return linear + flat_plate


def drag_coefficient(k: Coefficients, alpha: float) -> float:
    """Return SIM_Plane's dragCoeff: parasitic plus induced drag."""
    aspect_ratio = k.b ** 2 / k.s
    return k.c_drag_p + (k.c_lift_0 + k.c_lift_a * alpha) ** 2 / (
        math.pi * k.oswald * aspect_ratio)


def air_angles(air_frd: np.ndarray) -> Tuple[float, float, float]:
    """Return airspeed (m/s), angle of attack and sideslip (rad) of a body-FRD air velocity."""
    u, v, w = (float(x) for x in air_frd)
    return math.sqrt(u * u + v * v + w * w), math.atan2(w, u), math.atan2(v, u)


def wrench(k: Coefficients, air_frd: np.ndarray, rates_frd: np.ndarray,
           aileron: float, elevator: float,
           rudder: float) -> Tuple[np.ndarray, np.ndarray]:
    """
    Return the aerodynamic force (N) and moment (N m), body FRD, as SIM_Plane computes them.

    air_frd is the body's velocity through the air, rates_frd its body rates; aileron,
    elevator and rudder are normalised deflections (-1 to 1, positive rolls right, pitches up,
    yaws right).
    """
    airspeed, alpha, beta = air_angles(air_frd)
    if airspeed < MIN_AIRSPEED:
        return np.zeros(3), np.zeros(3)
    p, q, r = (float(x) for x in rates_frd)
    c_lift, c_drag = lift_coefficient(k, alpha), drag_coefficient(k, alpha)
    sin_a, cos_a = math.sin(alpha), math.cos(alpha)
    c_x = -c_drag * cos_a + c_lift * sin_a
    c_x_q = -k.c_drag_q * cos_a + k.c_lift_q * sin_a
    c_z = -c_drag * sin_a - c_lift * cos_a
    c_z_q = -k.c_drag_q * sin_a - k.c_lift_q * cos_a
    qbar = 0.5 * AIR_DENSITY * airspeed * airspeed * k.s
    half_chord, half_span = k.c / (2 * airspeed), k.b / (2 * airspeed)
    force = qbar * np.array([
        c_x + c_x_q * k.c * q / (2 * airspeed) - k.c_drag_deltae * cos_a * abs(elevator)
        + k.c_lift_deltae * sin_a * elevator,
        k.c_y_0 + k.c_y_b * beta + k.c_y_p * p * half_span + k.c_y_r * r * half_span
        + k.c_y_deltaa * aileron + k.c_y_deltar * rudder,
        c_z + c_z_q * k.c * q / (2 * airspeed) - k.c_drag_deltae * sin_a * abs(elevator)
        - k.c_lift_deltae * cos_a * elevator])
    moment = qbar * np.array([
        k.b * (k.c_l_0 + k.c_l_b * beta + k.c_l_p * p * half_span + k.c_l_r * r * half_span
               + k.c_l_deltaa * aileron + k.c_l_deltar * rudder),
        k.c * (k.c_m_0 + k.c_m_a * alpha + k.c_m_q * q * half_chord + k.c_m_deltae * elevator),
        k.b * (k.c_n_0 + k.c_n_b * beta + k.c_n_p * p * half_span + k.c_n_r * r * half_span
               + k.c_n_deltaa * aileron + k.c_n_deltar * rudder)])
    return force, moment


FRD = np.array([1.0, -1.0, -1.0])   # FLU <-> FRD: y and z change sign


def body_to_world(quaternion_wxyz: np.ndarray) -> np.ndarray:
    """Return the rotation matrix of a w-first unit quaternion (body to world)."""
    w, x, y, z = (float(v) for v in quaternion_wxyz)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


class FixedWing:
    """
    The wings of one MuJoCo vehicle: each step, its surfaces and motion in, a wrench out.

    surfaces maps aileron, elevator and rudder to the qpos addresses of their joints (radians,
    positive rolls right, pitches up, yaws right; several joints of one surface are averaged).
    The vehicle's free joint comes first: qpos[3:7] its attitude, qvel[0:3] its world
    velocity, qvel[3:6] its body rates.
    """

    def __init__(self, coefficients: Coefficients, surfaces: dict, body: int) -> None:
        self.k = coefficients
        self.surfaces = {name: list(addresses) for name, addresses in surfaces.items()}
        self.body = body
        self.maxima = {'aileron': coefficients.deltaa_max, 'elevator': coefficients.deltae_max,
                       'rudder': coefficients.deltar_max}
        self.airspeed = 0.0

    def _deflection(self, qpos: np.ndarray, name: str) -> float:
        addresses = self.surfaces[name]
        angle = float(np.mean(qpos[addresses])) if addresses else 0.0
        return max(-1.0, min(1.0, angle / self.maxima[name]))

    def apply(self, qpos: np.ndarray, qvel: np.ndarray, xfrc_applied: np.ndarray,
              wind: np.ndarray) -> None:
        """Set the body's applied force and torque (world frame) for the coming step."""
        rotation = body_to_world(qpos[3:7])
        air = FRD * (rotation.T @ (qvel[0:3] - wind))
        force, moment = wrench(self.k, air, FRD * qvel[3:6], self._deflection(qpos, 'aileron'),
                               self._deflection(qpos, 'elevator'),
                               self._deflection(qpos, 'rudder'))
        self.airspeed = float(np.linalg.norm(air))
        xfrc_applied[self.body, 0:3] = rotation @ (FRD * force)
        xfrc_applied[self.body, 3:6] = rotation @ (FRD * moment)
