"""
MuJoCo in true lock-step with SITL: each new frame applies its PWM and steps the physics.

The link calls on_frame for every new SITL frame (never for a duplicate, which is answered
again from the last reply), then serves the sample this pushed: SITL's clock is the model's.
Nothing runs while SITL is silent, and SITL's --speedup runs the model that much faster.

Stepping ahead (step_ahead, wired as SitlLink's step_ahead): after each reply the engine steps
the next frame at once as if it brings the same PWM, while SITL computes it. ArduCopter's
outputs change at its 400 Hz loop and SITL sends 1200 frames/s, so most frames repeat the one
before: such a frame is answered from the step already made, the reply the link encoded with
it; a frame whose PWM or rate differs goes back (bit for bit) and steps its own PWM. Either
way every reply is the one lock-step without it sends.

Reply-first (`mujoco --reply-first`): frame N is answered at once with the state stepped by
frame N - 1's PWM, and frame N's PWM is stepped after the reply (after_reply), while SITL
computes frame N + 1. Each PWM then acts one frame (1 / SIM_RATE_HZ) later than in lock-step,
and the physics overlaps SITL's own work instead of adding to it.
"""

import logging
import time
from typing import List, NamedTuple, Optional, Sequence, Tuple, TYPE_CHECKING, Union

from ardupilot_json_bridge.checks.conventions import ConventionChecker
from ardupilot_json_bridge.core.frames import enu_to_ned, flu_to_frd, ros_to_ned_frd
from ardupilot_json_bridge.core.protocol import ServoPacket
from ardupilot_json_bridge.core.pwm import ActuatorMapper, OutputGroup
from ardupilot_json_bridge.core.state import Instant, SensorState
from ardupilot_json_bridge.link.frame_answer import HELD, Held
from ardupilot_json_bridge.link.session import frame_period
from ardupilot_json_bridge.sources.flight_recorder import FlightRecorder
from ardupilot_json_bridge.sources.mujoco_vehicle import (
    MujocoVehicle, VehicleError, VehicleState)

if TYPE_CHECKING:
    from ardupilot_json_bridge.sources.mujoco_fleet import FleetWorld

VIEWER_PERIOD = 1.0 / 60.0
# Stepping ahead goes on while at least MIN_REPEATS of the recent frames (smoothed over about
# 1 / REPEATS_SMOOTHING frames) repeat the PWM and rate of the frame before.
MIN_REPEATS = 0.5
REPEATS_SMOOTHING = 1.0 / 32.0


def frame_instant(state: VehicleState) -> Instant:
    """
    Return the reply's instant (ArduPilot conventions) of a ROS-convention state.

    A lock-step frame is answered from it at once; the state's histories take it after.
    """
    gyro = flu_to_frd(state.body_rates)
    airspeed = state.airspeed
    return Instant(stamp=state.time, sequence=0, skipped=0, gyro=gyro,
                   accel=flu_to_frd(state.specific_force), position=enu_to_ned(state.position),
                   velocity=enu_to_ned(state.velocity),
                   quaternion=ros_to_ned_frd(*state.orientation),
                   ranges=(), wind=None if airspeed is None else enu_to_ned(state.wind),
                   airspeed=airspeed, battery=None, rc=None)


class SteppedAhead(NamedTuple):
    """A frame stepped on a guess (the PWM and rate of the frame stepped before): its reading."""

    reading: VehicleState
    instant: Instant


def outputs_description(vehicle: MujocoVehicle, groups: Sequence[OutputGroup]) -> str:
    """Say which SERVO channel drives which actuator, for the start-up log."""
    channels = [channel for group in groups for channel in group.channels]
    pairs = ', '.join(f'{name} SERVO{channel}'
                      for name, channel in zip(vehicle.actuator_names(), channels))
    return f'{vehicle.actuator_count} actuators ({pairs})'


class MujocoLockStep:
    """Steps a vehicle once per SITL frame and pushes what its sensors read."""

    def __init__(self, vehicle: MujocoVehicle, state: SensorState,
                 groups: Union[OutputGroup, Sequence[OutputGroup]], viewer: bool = False,
                 logger: Optional[logging.Logger] = None,
                 checker: Optional[ConventionChecker] = None,
                 recorder: Optional[FlightRecorder] = None,
                 world: Optional['FleetWorld'] = None, reply_first: bool = False) -> None:
        """
        Fly a vehicle alone, or one of a fleet whose world steps when all are ready.

        reply_first (a vehicle alone): answer each frame with the state already stepped, and
        step its PWM after the reply (see the module's note).
        """
        if reply_first and world is not None:
            raise VehicleError('reply-first serves one vehicle alone: a fleet steps its world '
                               'when every SITL has sent its frame')
        self.vehicle = vehicle
        self.world = world
        self.reply_first = reply_first
        # Reply-first: the frame answered whose PWM is still to be stepped, and whether the
        # state pushed so far holds a sample of this session to answer the first frame with.
        self._to_step: Optional[ServoPacket] = None
        self._primed = False
        self.state = state
        # Sees what the sensors read, in ROS conventions (the live convention checks).
        self.checker = checker
        self.recorder = recorder
        # The groups' outputs, in order, are the vehicle's actuators in order.
        self.groups = (groups,) if isinstance(groups, OutputGroup) else tuple(groups)
        outputs = sum(len(group.channels) for group in self.groups)
        if outputs != vehicle.actuator_count:
            names = ', '.join(group.name for group in self.groups)
            raise VehicleError(
                f'output groups {names} drive {outputs} outputs but {vehicle.path} has '
                f'{vehicle.actuator_count} actuators ({", ".join(vehicle.actuator_names())})')
        self.mapper = ActuatorMapper(self.groups)
        self.logger = logger or logging.getLogger('ardupilot_json_bridge.mujoco')
        self.frames = 0
        # Stepping ahead: the frame last stepped (its packet and commands), the guess at the
        # next, how many guesses were kept and how many went back, and the share of recent
        # frames that repeated the PWM and rate of the frame before (smoothed).
        self._stepped: Optional[Tuple[ServoPacket, List[float]]] = None
        self._ahead: Optional[SteppedAhead] = None
        self.kept_ahead = 0
        self.went_back = 0
        self.repeats = 1.0
        self._pending: Optional[Tuple[VehicleState, Tuple[int, ...], List[float]]] = None
        # A fleet's frame whose PWM is applied, waiting for the world to step (held_instant).
        self._held: Optional[Tuple[ServoPacket, List[float]]] = None
        self._viewer = None
        self._viewer_synced = 0.0
        if viewer:
            self._viewer = vehicle.view()
            if self._viewer is None:
                self.logger.warning('cannot open the MuJoCo viewer (no display?): running '
                                    'headless')

    @property
    def plain(self) -> bool:
        """Whether a frame was stepped and nothing is held or stepped ahead (a plain session)."""
        return self._ahead is None and self._held is None and self._stepped is not None

    @property
    def viewing(self) -> bool:
        """Whether MuJoCo's viewer shows the vehicle."""
        return self._viewer is not None

    def stepped_in_c(self, packet: ServoPacket, commands: List[float]) -> None:
        """Frames up to packet were stepped by the compiled frame loop, the last with commands."""
        self._stepped = (packet, commands)
        self._pending = None

    def on_frame(self, packet: ServoPacket) -> Union[Instant, Held, None]:
        """
        Apply the frame's PWM, step one frame period; return the instant to answer with.

        In a fleet, HELD: the world steps every vehicle at once, then held_instant() is read.

        The link answers the frame from that instant and pushes it to the state. Reply-first:
        step the frame before's PWM unless after_reply did, push it, keep this one's for after
        the reply; the first frame of a session is answered with the state as is. The state
        answers then (None is returned).
        """
        self.after_reply()
        if self.reply_first:
            if not self._primed:
                self._prime(packet)
            self._hand_on()  # what this frame is answered with
            self._to_step = packet
            self.frames += 1
            return None
        stepped, ahead, repeats = self._stepped, self._ahead, False
        if stepped is not None:
            before = stepped[0]
            repeats = packet.pwm == before.pwm and packet.frame_rate == before.frame_rate
            self.repeats += REPEATS_SMOOTHING * (repeats - self.repeats)
        if ahead is not None:
            # A guess is made for the frame last stepped only: it assumed that frame's PWM.
            self._ahead = None
            if repeats:
                commands = stepped[1]
                self.vehicle.keep_ahead()
                self.kept_ahead += 1
                self._stepped = (packet, commands)
                self._pending = (ahead.reading, packet.pwm, commands)
                self._check(ahead.reading, packet.pwm)
                self.frames += 1
                return ahead.instant
            self.vehicle.go_back()
            self.went_back += 1
        if self.world is not None:
            return self._hold(packet)
        instant = frame_instant(self._step(packet))
        self.frames += 1
        return instant

    def _hold(self, packet: ServoPacket) -> Held:
        """Apply packet's PWM and hand the frame to the fleet's world, which steps all at once."""
        self._held = (packet, self._apply(packet))
        self.world.arrive(self.vehicle.index, frame_period(packet.frame_rate))
        return HELD

    def held_instant(self) -> Optional[Instant]:
        """Return the instant the frame held answers with, once the world has stepped."""
        if self._held is None:
            return None
        (packet, commands), self._held = self._held, None
        self._stepped = (packet, commands)
        self.frames += 1
        return frame_instant(self._read(packet.pwm, commands))

    def step_ahead(self, packet: ServoPacket) -> Optional[Instant]:
        """
        Step the frame after packet's now, as if it brings the same PWM; return its instant.

        For after packet's reply (see the module's note); on_frame keeps the step if the
        frame does bring the same PWM and rate, or goes back. None (nothing stepped) unless
        packet was the frame last stepped in lock-step, by a vehicle alone with no viewer,
        while most frames repeat the one before (repeats >= MIN_REPEATS: at SIM_RATE_HZ 400
        every guess would be stepped twice, for nothing).
        """
        stepped = self._stepped
        if (stepped is None or stepped[0] is not packet or self._ahead is not None
                or self.repeats < MIN_REPEATS or self.reply_first or self.world is not None
                or self._viewer is not None):
            return None
        self.vehicle.step_ahead(frame_period(packet.frame_rate))
        reading = self.vehicle.state()
        instant = frame_instant(reading)
        self._ahead = SteppedAhead(reading, instant)
        return instant

    def _go_back(self) -> None:
        """Forget the step ahead, the vehicle back where it was before it."""
        self._stepped = None
        if self._ahead is not None:
            self._ahead = None
            self.vehicle.go_back()
            self.went_back += 1

    def _prime(self, packet: ServoPacket) -> None:
        """
        Push the state as it is, or a frame on if that instant was pushed already.

        The frame on runs with the commands last set: none after a restart, a failed step's
        after a failure. Primed only once pushed: a prime that fails is tried again.
        """
        newest = self.state.newest_primary()
        if newest is not None and self.vehicle.time <= newest:
            self.vehicle.advance(frame_period(packet.frame_rate))
        # No PWM of this session's frames produced the state (recorded with an empty PWM).
        self.push((), list(self.vehicle.commands))
        self._primed = True

    def _apply(self, packet: ServoPacket) -> List[float]:
        """Set the vehicle's commands from packet's PWM; return them."""
        self._stepped = None
        commands = self.mapper.commands(packet.pwm)
        self.vehicle.set_commands(commands)
        return commands

    def _step(self, packet: ServoPacket) -> VehicleState:
        """Apply packet's PWM, step one frame period; return (and keep) what the sensors read."""
        commands = self._apply(packet)
        self.vehicle.advance(frame_period(packet.frame_rate))
        self._stepped = (packet, commands)
        return self._read(packet.pwm, commands)

    def after_reply(self) -> None:
        """
        Record the frame answered (lock-step), step it (reply-first), sync the viewer.

        Reply-first records in on_frame the reading each frame is answered with.

        The link calls this after sending (SitlLink after_reply) so SITL computes its next
        frame meanwhile; without that wiring the next frame or close() does it first.
        """
        if not self.reply_first:
            self._hand_on()
        if self._to_step is not None:
            packet, self._to_step = self._to_step, None
            try:
                self.state.push_instant(frame_instant(self._step(packet)))
            except Exception as error:
                # Nothing new was pushed for the next frame: it is answered as after a restart.
                self._primed = False
                raise VehicleError(f'stepping frame {packet.frame_count} failed ({error}); the '
                                   'next frame is answered with the vehicle as it is') from error
        self._sync_viewer()

    def _check(self, reading: VehicleState, pwm: Tuple[int, ...]) -> None:
        """Hand a reading to the live checks with the PWM that produced it (one append)."""
        if self.checker is not None:
            self.checker.add_frame(reading.time, reading.body_rates, reading.specific_force,
                                   reading.position, reading.orientation,
                                   reading.body_velocity, pwm)

    def _hand_on(self) -> None:
        """Hand the reading pushed last to the recording with the PWM that produced it."""
        if self._pending is None:
            return
        reading, pwm, commands = self._pending
        self._pending = None
        if self.recorder is not None:
            self.recorder.add(reading, pwm, commands, self.vehicle.index)

    def _sync_viewer(self) -> None:
        """Show the vehicle, at most VIEWER_PERIOD apart."""
        if self._viewer is not None:
            now = time.monotonic()
            if now - self._viewer_synced >= VIEWER_PERIOD:
                self._viewer_synced = now
                self._viewer.sync()

    def _read(self, pwm: Tuple[int, ...], commands: List[float]) -> VehicleState:
        """Read the sensors now, hand the reading to the checks and keep it for the recording."""
        reading = self.vehicle.state()
        self._pending = (reading, pwm, commands)
        self._check(reading, pwm)
        return reading

    def push(self, pwm: Tuple[int, ...], commands: List[float]) -> VehicleState:
        """Push what the sensors read now to the state, keep it with pwm; return the reading."""
        reading = self._read(pwm, commands)
        self.state.push_instant(frame_instant(reading))
        return reading

    def on_restart(self) -> None:
        """SITL started again: the vehicle back at its start, at rest."""
        self._to_step = None  # the last session's PWM moves nothing any more
        self._primed = False
        self._go_back()
        self.after_reply()
        if self.world is None:
            self.vehicle.reset()
        else:
            self.world.reset(self.vehicle.index)
        self.mapper = ActuatorMapper(self.groups)
        if self.checker is not None:
            self.checker.clear()
        self.logger.info(f'SITL restarted: the MuJoCo vehicle{self._which()} is back at its '
                         'start, at rest')

    def _which(self) -> str:
        return '' if self.world is None else f' {self.vehicle.index}'

    def close(self) -> None:
        """Close the viewer and finish the recording (a fleet's shared one: its maker does)."""
        self._go_back()
        self.after_reply()
        guesses = self.kept_ahead + self.went_back
        if guesses:
            self.logger.info(f'stepped ahead {guesses} times: {self.kept_ahead} frames '
                             f'({self.kept_ahead / guesses:.0%}) brought the PWM guessed')
        if self._viewer is not None:
            self._viewer.close()
        if self.recorder is not None and self.world is None:
            self.recorder.close()
