"""
The engine's wind: a steady wind plus gusts, the same air the physics flies in and SITL hears.

Gusts are a first-order Gauss-Markov process on each axis (standard deviation gust, m/s,
correlation time time_constant, s), seeded, so a run can be repeated. World ENU, m/s.
"""

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from ardupilot_json_bridge.config import check_number, Limits

# The gusts' standard deviation (m/s): the engine's --gust and mujoco-sim's gust.
GUST_LIMITS = Limits(0.0, 50.0)
# The gusts' arrays and random state (None without gusts): what restore takes back.
WindSnapshot = Tuple[np.ndarray, np.ndarray, Optional[Dict[str, Any]]]


class Wind:
    """A steady wind and its gusts; step() advances the gusts and returns the wind now."""

    def __init__(self, steady: Sequence[float] = (0.0, 0.0, 0.0), gust: float = 0.0,
                 time_constant: float = 2.0, seed: Optional[int] = 0) -> None:
        if len(steady) != 3:
            raise ValueError(f'wind: expected three m/s (east, north, up), got {list(steady)}')
        values = np.array([check_number(f'wind[{i}]', v) for i, v in enumerate(steady)])
        gust = check_number('gust', gust, GUST_LIMITS)
        time_constant = check_number('time_constant', time_constant, Limits(0.0, above=True))
        self.steady = values
        self.gust = gust
        self.time_constant = time_constant
        self._random = np.random.default_rng(seed)
        self.gusts = np.zeros(3)
        self.now = values.copy()

    @property
    def calm(self) -> bool:
        """Whether there is no wind at all."""
        return not self.gust and not np.any(self.steady)

    def snapshot(self) -> WindSnapshot:
        """Return the gusts as they are (to restore): step replaces the arrays, never edits."""
        return self.gusts, self.now, self._random.bit_generator.state if self.gust else None

    def restore(self, snapshot: WindSnapshot) -> None:
        """Return the gusts to a snapshot: the same wind follows as after it."""
        self.gusts, self.now, random = snapshot
        if random is not None:
            self._random.bit_generator.state = random

    def step(self, dt: float) -> np.ndarray:
        """Advance the gusts by dt seconds; return the wind (ENU, m/s) for that step."""
        if self.gust:
            decay = math.exp(-dt / self.time_constant)
            spread = self.gust * math.sqrt(1.0 - decay * decay)
            self.gusts = decay * self.gusts + spread * self._random.standard_normal(3)
            self.now = self.steady + self.gusts
        return self.now
