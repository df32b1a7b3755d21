"""
A MuJoCo multirotor: rotor speeds in, ROS-convention sensors and truth out.

The engine behind `ardupilot-json-bridge mujoco` (lock-step) and the `mujoco_sim` node
(free-running). Rotors take speed commands in rad/s, as Gazebo's MulticopterMotorModel does;
each rotor's speed follows its command with a first-order lag, and its thrust is
k_f w^2 along the body z axis, with the yaw reaction the model's gear gives. Models keep
their rotor constants in MJCF <custom> numerics, so a new vehicle is one more model file.
World ENU, body FLU: what a ROS simulator publishes.
"""

from dataclasses import dataclass
import math
import os
from typing import Optional, Sequence, Tuple

import numpy as np

MODELS_DIR = os.path.join(os.path.dirname(__file__), 'models')
DEFAULT_MODEL = os.path.join(MODELS_DIR, 'quad_x.xml')
MUJOCO_MISSING = ('the MuJoCo engine needs the mujoco package: pip install mujoco '
                  "(or pip install 'ardupilot_json_bridge[mujoco]')")


class VehicleError(RuntimeError):
    """A model that cannot be loaded or flown; the message says what is wrong."""


def _mujoco():
    try:
        import mujoco
    except ImportError:
        raise VehicleError(MUJOCO_MISSING) from None
    return mujoco


@dataclass(slots=True)
class VehicleState:
    """
    The vehicle at one instant, in ROS conventions (REP-103).

    position and velocity in the ENU world; orientation x, y, z, w of FLU body in ENU;
    body_rates and specific_force (what the IMU reads) and body_velocity in FLU.
    """

    time: float
    position: Tuple[float, float, float]
    orientation: Tuple[float, float, float, float]
    velocity: Tuple[float, float, float]
    body_velocity: Tuple[float, float, float]
    body_rates: Tuple[float, float, float]
    specific_force: Tuple[float, float, float]


class MujocoVehicle:
    """One model and its data; advance() steps it by any whole number of model steps."""

    def __init__(self, path: str = DEFAULT_MODEL) -> None:
        mujoco = self._mujoco = _mujoco()
        try:
            self.model = mujoco.MjModel.from_xml_path(path)
        except ValueError as error:
            raise VehicleError(f'cannot load MuJoCo model {path}: {error}') from None
        self.data = mujoco.MjData(self.model)
        self.path = path
        self.nominal_step = float(self.model.opt.timestep)
        self.thrust_coefficient = self._numeric('rotor_thrust_coefficient')
        self.time_constant = self._numeric('rotor_time_constant')
        self.max_speed = self._numeric('rotor_max_speed')
        self.rotor_count = self.model.nu
        if self.rotor_count == 0:
            raise VehicleError(f'{path}: the model has no actuators (rotors)')
        self._gyro = self._sensor('gyro')
        self._accel = self._sensor('accelerometer')
        self.commands = np.zeros(self.rotor_count)
        self.speeds = np.zeros(self.rotor_count)
        self.steps = 0
        self.reset()

    def _numeric(self, name: str) -> float:
        index = self._mujoco.mj_name2id(self.model, self._mujoco.mjtObj.mjOBJ_NUMERIC, name)
        if index < 0:
            raise VehicleError(f'{self.path}: <custom><numeric name="{name}"> is missing')
        return float(self.model.numeric_data[self.model.numeric_adr[index]])

    def _sensor(self, name: str) -> slice:
        index = self._mujoco.mj_name2id(self.model, self._mujoco.mjtObj.mjOBJ_SENSOR, name)
        if index < 0:
            raise VehicleError(f'{self.path}: sensor {name!r} is missing')
        start = int(self.model.sensor_adr[index])
        return slice(start, start + int(self.model.sensor_dim[index]))

    @property
    def time(self) -> float:
        """Physics time in seconds: whole steps since the model was made, never reset."""
        return float(self.data.time)

    def reset(self) -> None:
        """Back to the initial pose at rest, rotors stopped; the clock keeps running."""
        now = self.data.time
        self._mujoco.mj_resetData(self.model, self.data)
        self.data.time = now
        self.commands[:] = 0.0
        self.speeds[:] = 0.0
        self._mujoco.mj_forward(self.model, self.data)

    def set_rotor_speeds(self, speeds: Sequence[float]) -> None:
        """Rotor speed commands in rad/s (rotor i is the model's actuator i)."""
        values = np.asarray(speeds, dtype=float)[:self.rotor_count]
        if not np.all(np.isfinite(values)):
            raise VehicleError(f'rotor speed commands are not finite: {values.tolist()}')
        self.commands[:len(values)] = np.clip(values, 0.0, self.max_speed)

    def advance(self, duration: float) -> None:
        """Step the physics by duration (a whole number of steps near the model's own)."""
        mujoco, model, data = self._mujoco, self.model, self.data
        count = max(1, round(duration / self.nominal_step))
        step = duration / count
        model.opt.timestep = step
        blend = 1.0 - math.exp(-step / self.time_constant)
        for _ in range(count):
            self.speeds += blend * (self.commands - self.speeds)
            data.ctrl[:] = self.thrust_coefficient * self.speeds * self.speeds
            mujoco.mj_step(model, data)
        self.steps += count
        mujoco.mj_forward(model, data)

    def state(self) -> VehicleState:
        """Truth and sensors at the current time, in ROS conventions."""
        data = self.data
        qpos, qvel = data.qpos, data.qvel
        w, x, y, z = (float(v) for v in qpos[3:7])
        velocity = (float(qvel[0]), float(qvel[1]), float(qvel[2]))
        body_velocity = np.zeros(3)
        self._mujoco.mju_rotVecQuat(body_velocity, qvel[0:3],
                                    np.array([w, -x, -y, -z]))
        sensors = data.sensordata
        return VehicleState(
            time=float(data.time), position=(float(qpos[0]), float(qpos[1]), float(qpos[2])),
            orientation=(x, y, z, w), velocity=velocity,
            body_velocity=tuple(float(v) for v in body_velocity),
            body_rates=tuple(float(v) for v in sensors[self._gyro]),
            specific_force=tuple(float(v) for v in sensors[self._accel]))

    def view(self) -> Optional[object]:
        """Show MuJoCo's passive viewer on this model, or None where no display can open."""
        try:
            import mujoco.viewer
            return mujoco.viewer.launch_passive(self.model, self.data)
        except Exception:
            return None
