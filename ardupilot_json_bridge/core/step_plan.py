"""
Lock-step through ROS: how many simulator steps reach the instant a SITL frame waits for.

The simulator, paused, moves only when the bridge asks, a whole number of its steps at a time.
The plan keeps count of where those steps took it (its clock when stepping began, plus steps
times the step size), so each request asks for the steps still missing and none twice: a
simulator's clock message may come after its step service has returned.

A SITL frame's instant rarely falls on a step (SITL at 1200 Hz, physics at 1000 Hz): the
simulator steps to the first step at or after it, and the reply is interpolated between the
samples either side, exactly at the instant on SITL's grid (the state's grid pacing).
"""

import math
from typing import Optional

from ardupilot_json_bridge.core.clocks import SAME_INSTANT

# Instants this close past a step (s) count as on it: the grid's and the simulator's
# arithmetic round differently. Well inside SAME_INSTANT, by which the state takes a sample
# before an instant as at it: a step this plan counts as reaching an instant always does, even
# where the simulator's own sum of its steps drifts from the plan's product.
ON_STEP = SAME_INSTANT / 10


class StepPlan:
    """Where the simulator's steps took it, and how many more an instant needs."""

    def __init__(self, start: float, step: float) -> None:
        """Begin at simulator time start (s); every step advances it step seconds."""
        if not (math.isfinite(start) and math.isfinite(step) and step > 0.0):
            raise ValueError(f'a step plan needs a finite start and a step above 0 s, got '
                             f'start {start!r}, step {step!r}')
        self.start = start
        self.step = step
        self.steps = 0

    @property
    def reached(self) -> float:
        """Return the simulator time the steps asked for so far reach."""
        return self.start + self.steps * self.step

    def steps_to(self, instant: Optional[float]) -> int:
        """
        Return the steps still needed for the simulator to reach instant (0 if it has).

        None (a SITL frame before any sample came) needs one step: a sample to start from.
        """
        if instant is None:
            return 1 if self.steps == 0 else 0
        if not math.isfinite(instant):
            return 0
        return max(0, math.ceil((instant - self.reached - ON_STEP) / self.step))

    def stepped(self, steps: int) -> None:
        """Record that the simulator took steps more steps."""
        self.steps += steps

    def restart_at(self, start: float) -> None:
        """Count again from simulator time start: its clock jumped (a reset)."""
        self.start, self.steps = start, 0
