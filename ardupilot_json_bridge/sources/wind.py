"""
The engine's wind: a steady wind plus gusts, the same air the physics flies in and SITL hears.

Gusts are a first-order Gauss-Markov process on each axis (standard deviation gust, m/s,
correlation time time_constant, s), seeded, so a run can be repeated. World ENU, m/s.
"""

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

# The gusts' arrays and random state (None without gusts): what restore takes back.
WindSnapshot = Tuple[np.ndarray, np.ndarray, Optional[Dict[str, Any]]]


class Wind:
    """A steady wind and its gusts; step() advances the gusts and returns the wind now."""

    def __init__(self, steady: Sequence[float] = (0.0, 0.0, 0.0), gust: float = 0.0,
                 time_constant: float = 2.0, seed: Optional[int] = 0) -> None:
        values = np.asarray(steady, dtype=float)
        if values.shape != (3,) or not np.all(np.isfinite(values)):
            raise ValueError(f'wind: expected three finite m/s (east, north, up), got '
                             f'{list(steady)}')
        if not (math.isfinite(gust) and gust >= 0.0 and time_constant > 0.0):
            raise ValueError(f'wind: gusts need a standard deviation >= 0 and a time constant '
                             f'> 0, got {gust} and {time_constant}')
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
