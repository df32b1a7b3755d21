"""
A fleet in one MuJoCo world, in lock-step with one SITL per vehicle.

One thread serves every vehicle's SITL (link/fleet_server.py): each frame's PWM is applied as
it arrives and its reply held; the world advances once every connected SITL has sent its next
one, as ardupilot_gazebo's plugins hold Gazebo's step, and each held frame is answered. It
steps by the shortest period the frames ask (the fastest SITL's rate): no SITL's frame is
stepped further than it asked, every SITL sees the same step whatever order its frames arrive
in, and SITL adopts the rate its timestamps show (SIM_JSON.cpp sets it from each step), so the
fleet settles on one rate. A SITL silent for longer than hold_timeout since the world last
answered it stops holding the others (its vehicle rests, one warning) and holds them again from
its next frame; a restart resets its vehicle only. hold_timeout stays below SITL's resend
interval (1.1 s), so a held frame is answered before its SITL sends it again: a reply after
the resend would be a second reply to the frame, read as the next one's. A SITL whose frame
the world failed to step is silent until its resend through no fault of its own: it is not let
go before that.
"""

import logging
import time
from typing import Callable, Dict, List, Optional, Sequence, Set

from ardupilot_json_bridge.link.session import RESEND_INTERVAL
from ardupilot_json_bridge.sources.mujoco_vehicle import advance_together, MujocoVehicle


class FleetWorld:
    """The lock-step of a fleet: who is connected, who sent its frame, and the world's step."""

    def __init__(self, vehicles: Sequence[MujocoVehicle], hold_timeout: float,
                 first_instance: int = 0, logger: Optional[logging.Logger] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.vehicles = tuple(vehicles)
        self.hold_timeout = hold_timeout
        self.first_instance = first_instance
        self.logger = logger or logging.getLogger('ardupilot_json_bridge.fleet')
        self._steps = 0
        # Steps another server made (the compiled frame loop's count), if any.
        self.steps_elsewhere: Optional[Callable[[], int]] = None
        self._clock = clock
        self._active: Set[int] = set()
        # The vehicles whose frame is in, and the period each asked.
        self._arrived: Dict[int, float] = {}
        # When each vehicle's SITL last had the world's attention: its frame came, or the world
        # answered it (a SITL held cannot send, so its silence counts from its release).
        self._heard: Dict[int, float] = {}

    def _name(self, index: int) -> str:
        return f'vehicle {index} (SITL instance {self.first_instance + index})'

    @property
    def all_holding(self) -> bool:
        """Whether every vehicle's SITL holds the world and no frame is in yet (a plain fleet)."""
        return len(self._active) == len(self.vehicles) and not self._arrived

    @property
    def released(self) -> float:
        """Return when the world last answered every SITL (the oldest, for the hold)."""
        return min(self._heard.values(), default=self._clock())

    @property
    def steps(self) -> int:
        """Return how many times the world stepped, here and in the compiled frame loop."""
        return self._steps + (self.steps_elsewhere() if self.steps_elsewhere else 0)

    def answered_at(self, released: float) -> None:
        """Note that the compiled loop answered every SITL holding the world at released."""
        for index in self._active:
            self._heard[index] = released

    @property
    def holding(self) -> List[int]:
        """Return the vehicles whose SITL the world waits for, in order (the serving thread's)."""
        return sorted(self._active)

    def arrive(self, index: int, duration: float) -> None:
        """Vehicle index's SITL sent its frame, asking the world to step by duration."""
        self._heard[index] = self._clock()
        if index not in self._active:
            self._active.add(index)
            self.logger.info(f'{self._name(index)}: its SITL holds the world again'
                             if self.steps else f'{self._name(index)}: its SITL holds the world')
        self._arrived[index] = duration

    def wait_time(self) -> Optional[float]:
        """Return how long to wait for frames before a silent SITL is let go (None: no limit)."""
        waiting = self._active - self._arrived.keys()
        if not self._arrived or not waiting:
            return None if not self._arrived else 0.0
        due = min(self._heard[other] for other in waiting) + self.hold_timeout
        return max(0.0, due - self._clock())

    def advance(self) -> List[int]:
        """
        Step the world if every connected SITL's frame is in, after letting the silent go.

        Returns the vehicles whose frames the step answers (none: still waiting).
        """
        if not self._arrived or self._drop_silent(self._clock()):
            return []
        return self._advance()

    def _drop_silent(self, now: float) -> Set[int]:
        """Return the connected vehicles not in yet, after letting the silent ones go."""
        waiting = self._active - self._arrived.keys()
        for other in sorted(waiting):
            silent = now - self._heard[other]
            if silent > self.hold_timeout:
                self._active.discard(other)
                self.logger.warning(
                    f'{self._name(other)}: its SITL has been silent for {silent:.2f} s '
                    f'(hold_timeout {self.hold_timeout:g} s): the others fly on without it '
                    'and the vehicle rests until its SITL sends again')
        return self._active - self._arrived.keys()

    def _advance(self) -> List[int]:
        """Step the world by the shortest period asked; the SITLs answered are heard now."""
        duration = min(self._arrived.values())
        for index, vehicle in enumerate(self.vehicles):
            if index not in self._active:
                # Resting: nothing drives it (rotors run down, servos hold zero).
                vehicle.set_commands([0.0] * vehicle.actuator_count)
        stepped = sorted(self._arrived)
        try:
            advance_together(self.vehicles, duration)
        except Exception:
            # Their SITLs resend these frames RESEND_INTERVAL from now, silent until then
            # through the world's failure, not their own: none is let go before that.
            due = self._clock() + RESEND_INTERVAL
            for index in stepped:
                self._heard[index] = due
            raise
        finally:
            # Stepped or failed, these frames are done with: a failure is not stepped again
            # until their SITLs send them again.
            self._arrived.clear()
        released = self._clock()
        for index in stepped:
            self._heard[index] = released
        self._steps += 1
        return stepped

    def reset(self, index: int) -> None:
        """Vehicle index's SITL restarted: that vehicle back at its start, the others fly on."""
        self.vehicles[index].reset()
