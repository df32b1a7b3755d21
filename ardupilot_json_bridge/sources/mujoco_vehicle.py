"""
A MuJoCo vehicle: actuator commands in, ROS-convention sensors and truth out.

The engine behind `ardupilot-json-bridge mujoco` (lock-step) and the `mujoco_sim` node
(free-running). World ENU, body FLU: what a ROS simulator publishes.

What a vehicle needs (a boat or a sub is one more model file and one more preset):
- An MJCF model in models/ (ours, no meshes) with an `imu` site carrying a `gyro` and an
  `accelerometer` sensor, and a free joint first (qpos[0:7] is the vehicle's pose).
- Its actuators, in the order the preset's output groups list their channels. Each takes its
  command in the unit a ROS controller would send, and the MJCF element says which kind it is:
  * a rotor (<general> or <motor>: no bias) takes a speed in rad/s, as Gazebo's
    MulticopterMotorModel does; its speed follows the command with a first-order lag and its
    force is k_f w^2 through the actuator's gear (thrust along an axis, yaw reaction). The
    constants are <custom> numerics: rotor_thrust_coefficient, rotor_time_constant,
    rotor_max_speed (rad/s).
  * a joint position servo (<position>) takes radians, a joint velocity servo (<velocity>)
    rad/s: MuJoCo's own servos, as ros2_control's forward position and velocity
    controllers drive them.
- Forces MuJoCo does not model (a wing's lift, a hull's drag) as a per-step force model named
  by <custom><text name="forces" data="NAME"/>, one of FORCE_MODELS, with its coefficients as
  more <custom> numerics. Force models feel the engine's wind (wind.py) and may report an
  airspeed, which the lock-step and the node pass on to SITL.
- An output preset in config/ mapping SERVO channels to those commands, and an entry in
  VEHICLES naming both.
"""

import ctypes
from dataclasses import dataclass
import functools
import glob
import logging
import math
import os
from typing import Optional, Sequence, Tuple

import numpy as np

from ardupilot_json_bridge.compiled import _frame
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.sources.fixed_wing import Coefficients, FixedWing
from ardupilot_json_bridge.sources.wind import Wind, WindSnapshot

MODELS_DIR = os.path.join(os.path.dirname(__file__), 'models')
DEFAULT_MODEL = os.path.join(MODELS_DIR, 'quad_x.xml')
DEFAULT_VEHICLE = 'quad_x'
# qpos and qvel sizes of MuJoCo's joint types: free, ball, slide, hinge.
JOINT_SIZES = {0: (7, 6), 1: (4, 3), 2: (1, 1), 3: (1, 1)}
# Metres between a fleet's vehicles at the start, north of each other.
FLEET_SPACING = 2.0
# MuJoCo's warnings of a diverged simulation (mjtWarning), after which mj_step resets the
# whole world to its initial state and time 0 (engine_forward.c, mj_checkPos/Vel/Acc).
DIVERGENCE_WARNINGS = {'mjWARN_BADQPOS': 'position', 'mjWARN_BADQVEL': 'velocity',
                       'mjWARN_BADQACC': 'acceleration'}
MUJOCO_MISSING = ('the MuJoCo engine needs the mujoco package: pip install mujoco '
                  "(or pip install 'ardupilot_json_bridge[mujoco]')")


class VehicleError(RuntimeError):
    """A model that cannot be loaded or flown; the message says what is wrong."""


FORCE_MODELS = ('fixed_wing',)


def _mujoco():
    try:
        import mujoco
    except ImportError:
        raise VehicleError(MUJOCO_MISSING) from None
    return mujoco


# The MuJoCo functions the compiled frame calls, from the wheel's own library.
MUJOCO_FUNCTIONS = ('mj_step', 'mj_step2', 'mj_forward', 'mj_getState')


@functools.lru_cache(maxsize=None)
def mujoco_functions() -> Tuple[int, ...]:
    """
    Return the addresses of MUJOCO_FUNCTIONS in the library the mujoco bindings use.

    The compiled frame (compiled/_frame.c) steps the bindings' own model and data through
    them, so it needs no MuJoCo header to build; the library must be the bindings' version.
    """
    mujoco = _mujoco()
    folder = os.path.dirname(mujoco.__file__)
    paths = sorted(path for pattern in ('libmujoco.so*', 'libmujoco*.dylib', 'mujoco.dll')
                   for path in glob.glob(os.path.join(folder, pattern)))
    if not paths:
        raise VehicleError(f'the mujoco package in {folder} ships no MuJoCo library to step '
                           'with: reinstall it with pip install mujoco')
    library = ctypes.CDLL(paths[0])
    if library.mj_version() != mujoco.mj_version():
        raise VehicleError(f'{paths[0]} is MuJoCo {library.mj_version()}, the bindings '
                           f'{mujoco.mj_version()}: reinstall mujoco')
    return tuple(ctypes.cast(getattr(library, name), ctypes.c_void_p).value
                 for name in MUJOCO_FUNCTIONS)


def frame_steps(duration: float, nominal_step: float) -> Tuple[int, float]:
    """Return the whole number of steps near nominal_step making up duration, and their step."""
    count = max(1, round(duration / nominal_step))
    return count, duration / count


def reading_state(reading: Sequence[float], wind: Tuple[float, float, float] = (0.0, 0.0, 0.0),
                  airspeed: Optional[float] = None) -> 'VehicleState':
    """Return the VehicleState of a compiled reading (_frame.Vehicle.read, the frame loop)."""
    t, px, py, pz, x, y, z, w, vx, vy, vz, gx, gy, gz, ax, ay, az = reading
    return VehicleState(time=t, position=(px, py, pz), orientation=(x, y, z, w),
                        velocity=(vx, vy, vz), body_rates=(gx, gy, gz),
                        specific_force=(ax, ay, az), wind=wind, airspeed=airspeed)


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
    body_rates: Tuple[float, float, float]
    specific_force: Tuple[float, float, float]
    wind: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    airspeed: Optional[float] = None

    @property
    def body_velocity(self) -> Tuple[float, float, float]:
        """Return the world velocity turned into the body (the attitude matrix's transpose)."""
        return _frame.world_to_body(self.orientation, self.velocity)


@dataclass(frozen=True)
class ShippedVehicle:
    """A vehicle shipped with the package: its model in models/ and its preset in config/."""

    model: str
    preset: str
    description: str


VEHICLES = {
    'quad_x': ShippedVehicle('quad_x.xml', 'mujoco_quad_x.yaml', 'quad X for ArduCopter'),
    'rover': ShippedVehicle('rover.xml', 'mujoco_rover.yaml',
                            'Ackermann rover for ArduRover (rover.parm)'),
    'rover_skid': ShippedVehicle('rover_skid.xml', 'mujoco_rover_skid.yaml',
                                 'skid-steer rover for ArduRover (rover.parm, '
                                 'rover-skid.parm)'),
    'plane': ShippedVehicle('plane.xml', 'mujoco_plane.yaml',
                            'small electric plane for ArduPlane (plane.parm)'),
}
# Surfaces a fixed-wing model names its joints after: <surface> or <surface>_<anything>.
SURFACES = ('aileron', 'elevator', 'rudder')


def shipped_model(name_or_path: str) -> Tuple[str, Optional[ShippedVehicle]]:
    """Return the MJCF path of a shipped vehicle's name (and the vehicle), or a path as given."""
    vehicle = VEHICLES.get(name_or_path)
    if vehicle is not None:
        return os.path.join(MODELS_DIR, vehicle.model), vehicle
    if not name_or_path.endswith('.xml') and not os.path.exists(name_or_path):
        raise VehicleError(f'--model: {name_or_path!r} is neither a shipped vehicle '
                           f'({", ".join(VEHICLES)}) nor an MJCF file')
    return name_or_path, None


def fleet_prefix(index: int) -> str:
    """Name prefix of vehicle index's elements in a fleet's world: none for the first."""
    return f'v{index}_' if index else ''


def engine_wind(vehicle: 'MujocoVehicle', wind: Optional[str], gust: float) -> Wind:
    """Return the wind asked for ('EAST,NORTH[,UP]' m/s and gusts) for a vehicle that feels it."""
    if vehicle.aero is None:
        raise VehicleError(f'--wind: {vehicle.path} has no aerodynamics to feel a wind')
    try:
        values = [float(v) for v in (wind or '0,0').split(',')]
    except ValueError:
        values = []
    if len(values) not in (2, 3):
        raise VehicleError(f'--wind: expected EAST,NORTH[,UP] in m/s, got {wind!r}')
    try:
        return Wind((values + [0.0])[:3], gust)
    except ValueError as error:
        raise VehicleError(f'--{error}') from None


def load_world(path: str, count: int = 1, spacing: float = FLEET_SPACING):
    """
    Return the MjModel of count copies of a vehicle model in one world, and its MjData.

    The first copy is the model as it is (its ground, its light); copy k is its free-jointed
    body attached with the prefix v<k>_ (actuators, sensors and all), spacing metres north of
    the first, so the copies touch each other and the ground like any two bodies.
    """
    mujoco = _mujoco()
    try:
        if count == 1:
            model = mujoco.MjModel.from_xml_path(path)
        else:
            spec = mujoco.MjSpec.from_file(path)
            roots = [body for body in spec.worldbody.bodies if body.first_joint() is not None]
            if len(roots) != 1:
                raise VehicleError(f'{path}: a fleet needs one free-jointed body in the '
                                   f'world, found {len(roots)}')
            for index in range(1, count):
                copy = mujoco.MjSpec.from_file(path)
                frame = spec.worldbody.add_frame(pos=[0.0, spacing * index, 0.0])
                frame.attach_body(copy.body(roots[0].name), fleet_prefix(index), '')
            model = spec.compile()
    except ValueError as error:
        raise VehicleError(f'cannot load MuJoCo model {path}: {error}') from None
    return model, mujoco.MjData(model)


class MujocoVehicle:
    """
    A vehicle and the world it is in; advance() steps it by any whole number of model steps.

    Alone, the vehicle owns its model and data. In a fleet (world from load_world, index k)
    it is the k-th free-jointed body and the k-th share of the actuators, and
    advance_together steps the world for all of them at once.
    """

    def __init__(self, path: str = DEFAULT_MODEL, world=None, index: int = 0) -> None:
        mujoco = self._mujoco = _mujoco()
        self.model, self.data = world if world is not None else load_world(path)
        self.path = path
        self.index = index
        self.prefix = fleet_prefix(index)
        model = self.model
        free = [joint for joint in range(model.njnt)
                if model.jnt_type[joint] == mujoco.mjtJoint.mjJNT_FREE]
        self.fleet_size = max(1, len(free))
        if world is not None and (index >= len(free) or model.nu % len(free)):
            raise VehicleError(f'{path}: vehicle {index} is not in a world of {len(free)} '
                               f'free bodies and {model.nu} actuators')
        self.nominal_step = float(model.opt.timestep)
        self.actuator_count = model.nu // self.fleet_size
        if self.actuator_count == 0:
            raise VehicleError(f'{path}: the model has no actuators')
        first = self.actuator_count * index
        self._ctrl = slice(first, first + self.actuator_count)
        # The vehicle's pose and velocity: its free joint, and its joints after it.
        root = free[index] if free else 0
        self.body = int(model.jnt_bodyid[root]) if free else 1
        self._qpos = int(model.jnt_qposadr[root]) if free else 0
        self._qvel = int(model.jnt_dofadr[root]) if free else 0
        mine = [joint for joint in range(model.njnt)
                if model.body_rootid[model.jnt_bodyid[joint]] == model.body_rootid[self.body]]
        self._joints = mine
        # Rotors are the actuators without a bias; the rest are MuJoCo's own servos. Per-frame
        # values are plain floats: numpy costs more than the math on a handful of them.
        self.rotors = tuple(bool(kind == mujoco.mjtBias.mjBIAS_NONE)
                            for kind in model.actuator_biastype[self._ctrl])
        self.rotor_count = sum(self.rotors)
        if self.rotor_count:
            self.thrust_coefficient = self._numeric('rotor_thrust_coefficient')
            self.time_constant = self._numeric('rotor_time_constant')
            self.max_speed = self._numeric('rotor_max_speed')
        limited = model.actuator_ctrllimited[self._ctrl].tolist()
        ranges = model.actuator_ctrlrange[self._ctrl].tolist()
        self.lower = tuple(0.0 if rotor else low if on else -math.inf
                           for rotor, on, (low, _) in zip(self.rotors, limited, ranges))
        self.upper = tuple(self.max_speed if rotor else high if on else math.inf
                           for rotor, on, (_, high) in zip(self.rotors, limited, ranges))
        self._gyro = self._sensor('gyro')
        self._accel = self._sensor('accelerometer')
        self.wind = Wind()
        self.aero = self._force_model()
        # The commands and the rotors' speeds, where the compiled frame reads and sets them.
        self._commands = np.zeros(self.actuator_count)
        self._speeds = np.zeros(self.actuator_count)
        self.kernel = self._compiled()
        self.steps = 0
        # Times MuJoCo found the world diverged and reset it (advance_together).
        self.divergences = 0
        self.warnings = RateLimitedLog(logging.getLogger('ardupilot_json_bridge.mujoco'))
        # MuJoCo's RK4 as the int model.opt.integrator reads (an enum compares slower).
        self.rk4 = int(mujoco.mjtIntegrator.mjINT_RK4)
        # True while data holds mj_step1's results (mj_forward ran) at the current state.
        self.forwarded = False
        # Stepping ahead (a vehicle alone): what a step on a guess left behind, the data's
        # integration state among it.
        self._behind: Optional[Tuple[Tuple[float, ...], int, bool, WindSnapshot,
                                     Optional[float]]] = None
        self._integration = mujoco.mjtState.mjSTATE_INTEGRATION
        self._state_behind: Optional[np.ndarray] = None
        if world is None:
            self.reset()

    def _compiled(self) -> '_frame.Vehicle':
        """Return the compiled vehicle: actuators, rotors and sensors as addresses in data."""
        model, data = self.model, self.data
        if self._gyro.stop - self._gyro.start != 3 or self._accel.stop - self._accel.start != 3:
            raise VehicleError(f'{self.path}: the gyro and the accelerometer read 3 values')

        def at(array: np.ndarray, index: int) -> int:
            return array.ctypes.data + index * array.itemsize

        sensors = data.sensordata
        pointers = (model._address, data._address, at(data.ctrl, self._ctrl.start),
                    at(data.qpos, self._qpos), at(data.qvel, self._qvel),
                    at(sensors, self._gyro.start), at(sensors, self._accel.start),
                    at(self._commands, 0), at(self._speeds, 0))
        thrust, time_constant = ((self.thrust_coefficient, self.time_constant)
                                 if self.rotor_count else (0.0, 1.0))
        return _frame.Vehicle((model, data, self._commands, self._speeds), mujoco_functions(),
                              pointers, self.rotors, self.lower, self.upper, thrust,
                              time_constant)

    @property
    def split_step(self) -> bool:
        """
        Whether the next advance's first step is mj_step2 alone (mj_forward ran at this state).

        mj_step2 integrates with Euler (or implicit) whatever the model says: RK4 steps whole.
        """
        return self.forwarded and int(self.model.opt.integrator) != self.rk4

    @property
    def commands(self) -> list:
        """Actuator commands, in their units, as last set (clamped into their bounds)."""
        return self._commands.tolist()

    @property
    def speeds(self) -> list:
        """Rotor speeds in rad/s (0 for other actuators)."""
        return self._speeds.tolist()

    def _numeric(self, name: str) -> float:
        index = self._mujoco.mj_name2id(self.model, self._mujoco.mjtObj.mjOBJ_NUMERIC, name)
        if index < 0:
            raise VehicleError(f'{self.path}: <custom><numeric name="{name}"> is missing')
        return float(self.model.numeric_data[self.model.numeric_adr[index]])

    def _force_model(self) -> Optional[FixedWing]:
        mujoco, model = self._mujoco, self.model
        index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_TEXT, 'forces')
        if index < 0:
            return None
        start = int(model.text_adr[index])
        name = bytes(model.text_data[start:start + int(model.text_size[index]) - 1]).decode()
        if name not in FORCE_MODELS:
            raise VehicleError(f'{self.path}: <custom><text name="forces"> is {name!r}, not '
                               f'one of {", ".join(FORCE_MODELS)}')
        # Addresses from the vehicle's own free joint: advance hands it its qpos from there.
        surfaces = {surface: [] for surface in SURFACES}
        for joint in self._joints:
            joint_name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, joint) or ''
            surface = joint_name[len(self.prefix):].split('_')[0]
            if surface in surfaces:
                surfaces[surface].append(int(model.jnt_qposadr[joint]) - self._qpos)
        return FixedWing(Coefficients.read(self._numeric), surfaces, body=self.body)

    def _sensor(self, name: str) -> slice:
        index = self._mujoco.mj_name2id(self.model, self._mujoco.mjtObj.mjOBJ_SENSOR,
                                        self.prefix + name)
        if index < 0:
            raise VehicleError(f'{self.path}: sensor {name!r} is missing')
        start = int(self.model.sensor_adr[index])
        return slice(start, start + int(self.model.sensor_dim[index]))

    def actuator_names(self) -> Tuple[str, ...]:
        """Return the model's actuators' names in command order."""
        mujoco = self._mujoco
        return tuple(mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_ACTUATOR, i) or str(i)
                     for i in range(self._ctrl.start, self._ctrl.stop))

    @property
    def time(self) -> float:
        """Physics time in seconds: whole steps since the model was made, never reset."""
        return float(self.data.time)

    def reset(self) -> None:
        """Back to the initial pose at rest, rotors stopped; the clock keeps running."""
        model, data = self.model, self.data
        if self.fleet_size == 1:
            now = data.time
            self._mujoco.mj_resetData(model, data)
            data.time = now
        else:
            # Only this vehicle: the others fly on.
            for joint in self._joints:
                start, dof = int(model.jnt_qposadr[joint]), int(model.jnt_dofadr[joint])
                sizes = JOINT_SIZES[int(model.jnt_type[joint])]
                data.qpos[start:start + sizes[0]] = model.qpos0[start:start + sizes[0]]
                data.qvel[dof:dof + sizes[1]] = 0.0
            data.ctrl[self._ctrl] = 0.0
        self._commands[:] = 0.0
        self._speeds[:] = 0.0
        self._mujoco.mj_forward(model, data)
        self.forwarded = True

    def step_ahead(self, duration: float) -> None:
        """
        Step duration ahead on a guess, keeping what it leaves behind to go back to.

        Keeps the data's integration state first (mjSTATE_INTEGRATION: all the next step
        depends on, 0.6 us against 4 us for a copy of the data): keep_ahead forgets it,
        go_back sets it again and runs mj_forward, which derives the rest from it as before
        the guess, bit for bit. A vehicle alone (a fleet's world is every vehicle's), one
        guess at a time.
        """
        if self.fleet_size != 1 or self._behind is not None:
            raise VehicleError('stepping ahead needs a vehicle alone, not stepped ahead already')
        mujoco, model = self._mujoco, self.model
        if self._state_behind is None:
            self._state_behind = np.empty(mujoco.mj_stateSize(model, self._integration))
        mujoco.mj_getState(model, self.data, self._state_behind, self._integration)
        self._behind = (self._speeds.copy(), self.steps, self.forwarded, self.wind.snapshot(),
                        None if self.aero is None else self.aero.airspeed)
        try:
            self.advance(duration)
        except BaseException:
            self.go_back()
            raise

    def keep_ahead(self) -> None:
        """Make the step ahead the world: what it left behind is forgotten."""
        self._behind = None

    def go_back(self) -> None:
        """Return to the world as it was before the step ahead (none: nothing to do)."""
        behind = self._behind
        if behind is None:
            return
        self._behind = None
        speeds, self.steps, self.forwarded, wind, airspeed = behind
        mujoco, model, data = self._mujoco, self.model, self.data
        mujoco.mj_setState(model, data, self._state_behind, self._integration)
        if self.forwarded:
            mujoco.mj_forward(model, data)
        self._speeds[:] = speeds
        self.wind.restore(wind)
        if self.aero is not None:
            self.aero.airspeed = airspeed

    def set_commands(self, values: Sequence[float]) -> None:
        """Actuator i's command, in its unit (rotor rad/s, joint rad or rad/s), for each i."""
        if not self.kernel.set_commands(values):
            values = [float(value) for value in values[:self.actuator_count]]
            raise VehicleError(f'actuator commands are not finite: {values}')

    def set_rotor_speeds(self, speeds: Sequence[float]) -> None:
        """Rotor speeds in rad/s: set_commands for a vehicle whose actuators are all rotors."""
        self.set_commands(speeds)

    def advance(self, duration: float) -> None:
        """Step the physics by duration (a whole number of steps near the model's own)."""
        advance_together((self,), duration)

    def _apply_forces(self, step: float) -> None:
        """Before each step: the vehicle's own forces (a force model MuJoCo does not have)."""
        data = self.data
        self.aero.apply(data.qpos[self._qpos:], data.qvel[self._qvel:], data.xfrc_applied,
                        self.wind.step(step))

    def state(self) -> VehicleState:
        """Truth and sensors at the current time, in ROS conventions."""
        return reading_state(self.kernel.read(), tuple(self.wind.now.tolist()),
                             None if self.aero is None else self.aero.airspeed)

    def view(self) -> Optional[object]:
        """Show MuJoCo's passive viewer on this model, or None where no display can open."""
        try:
            import mujoco.viewer
            return mujoco.viewer.launch_passive(self.model, self.data)
        except Exception:
            return None


def advance_together(vehicles: Sequence[MujocoVehicle], duration: float) -> None:
    """
    Step the world the vehicles share by duration, each applying its commands every step.

    Each advance ends with mj_forward (the sensors at the new state), which is mj_step1 at
    that state: the next advance's first step is then MuJoCo's split step, commands set
    between mj_step1 and mj_step2, and only mj_step2 runs; bit-identical to mj_step for the
    Euler and implicit integrators, not RK4 (mj_step2 never runs RK4), so an RK4 model
    always steps with mj_step. Code that changes data's state
    between advances must run mj_forward after (MuJoCo's own rule for mj_step2), or clear
    the first vehicle's `forwarded`.
    """
    first = vehicles[0]
    mujoco, model, data = first._mujoco, first.model, first.data
    count, step = frame_steps(duration, first.nominal_step)
    end = data.time + count * step
    # Read every time, as the step is set: a viewer's physics panel may change either.
    model.opt.timestep = step
    split = first.split_step
    # The rotors' lag, their thrust and the step in C (the frame loop's own); a force model
    # runs before each of its vehicle's steps.
    hooks = tuple(None if vehicle.aero is None else
                  functools.partial(vehicle._apply_forces, step) for vehicle in vehicles)
    _frame.advance(tuple(vehicle.kernel for vehicle in vehicles), hooks, count, step, split)
    for vehicle in vehicles:
        vehicle.steps += count
    if data.time < end - 0.5 * step:
        _diverged(vehicles, end)
    mujoco.mj_forward(model, data)
    first.forwarded = True


def _diverged(vehicles: Sequence[MujocoVehicle], end: float) -> None:
    """
    Say that MuJoCo reset the world (time 0, every body at its start); keep the clock running.

    Without this the reset reads as the source's clock jumping back, which the link puts down
    to a simulation reset or a looping bag. The vehicles' rotors stop, as at the start.
    """
    first = vehicles[0]
    mujoco, data = first._mujoco, first.data
    causes = []
    for name, what in DIVERGENCE_WARNINGS.items():
        warning = data.warning[int(getattr(mujoco.mjtWarning, name))]
        if warning.number:
            causes.append(f'{what} not finite or huge at degree of freedom {warning.lastinfo}')
            warning.number = 0
    data.time = end
    for vehicle in vehicles:
        vehicle._commands[:] = 0.0
        vehicle._speeds[:] = 0.0
        vehicle.divergences += 1
    first.warnings.error('diverged', f'MuJoCo diverged ({"; ".join(causes) or "unstable"}) '
                                     f'and reset {first.path} to its start at {end:.3f} s of '
                                     'physics: an unstable model, a stiff contact or too long a '
                                     'time step; the clock carries on')
