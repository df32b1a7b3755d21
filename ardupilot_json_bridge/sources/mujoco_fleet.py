"""
A fleet in one MuJoCo world, in lock-step with one SITL per vehicle.

Each vehicle's link thread hands in its frame and waits; the world advances once every
connected SITL has sent its next one, as ardupilot_gazebo's plugins hold Gazebo's step. It
steps by the shortest period the frames ask (the fastest SITL's rate): no SITL's frame is
stepped further than it asked, every SITL sees the same step whatever order its frames arrive
in, and SITL adopts the rate its timestamps show (SIM_JSON.cpp sets it from each step), so the
fleet settles on one rate. A SITL silent for longer than hold_timeout since the world last
answered it stops holding the others (its vehicle rests, one warning) and holds them again from
its next frame; a restart resets its vehicle only. hold_timeout stays below SITL's resend
interval (1.1 s), so a held frame is answered before its SITL sends it again: a reply after
the resend would be a second reply to the frame, read as the next one's.
"""

import logging
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Set

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
        self.steps = 0
        self._clock = clock
        self._condition = threading.Condition()
        self._active: Set[int] = set()
        # The vehicles whose frame is in, and the period each asked.
        self._arrived: Dict[int, float] = {}
        # When each vehicle's SITL last had the world's attention: its frame came, or the world
        # answered it (a SITL held cannot send, so its silence counts from its release).
        self._heard: Dict[int, float] = {}
        self._closed = False

    def _name(self, index: int) -> str:
        return f'vehicle {index} (SITL instance {self.first_instance + index})'

    @property
    def holding(self) -> List[int]:
        """Return the vehicles whose SITL the world waits for, in order."""
        with self._condition:
            return sorted(self._active)

    def step(self, index: int, duration: float) -> None:
        """Vehicle index's SITL sent its frame: wait until the world stepped by duration."""
        with self._condition:
            now = self._clock()
            self._heard[index] = now
            if index not in self._active:
                self._active.add(index)
                self.logger.info(f'{self._name(index)}: its SITL holds the world again'
                                 if self.steps else f'{self._name(index)}: its SITL holds '
                                 'the world')
            self._arrived[index] = duration
            generation = self.steps
            while self.steps == generation and not self._closed:
                waiting = self._drop_silent(now)
                if not waiting:
                    self._advance()
                    return
                wait = min(self._heard[other] for other in waiting) + self.hold_timeout - now
                self._condition.wait(max(wait, 1e-3))
                now = self._clock()

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

    def _advance(self) -> None:
        """Step the world by the shortest period asked; the SITLs answered are heard now."""
        duration = min(self._arrived.values())
        for index, vehicle in enumerate(self.vehicles):
            if index not in self._active:
                # Resting: nothing drives it (rotors run down, servos hold zero).
                vehicle.set_commands([0.0] * vehicle.actuator_count)
        advance_together(self.vehicles, duration)
        released = self._clock()
        for index in self._arrived:
            self._heard[index] = released
        self._arrived.clear()
        self.steps += 1
        self._condition.notify_all()

    def reset(self, index: int) -> None:
        """Vehicle index's SITL restarted: that vehicle back at its start, the others fly on."""
        with self._condition:
            self.vehicles[index].reset()

    def close(self) -> None:
        """Release every waiting link thread (shutdown)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
