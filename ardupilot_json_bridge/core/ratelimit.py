"""Rate-limited warnings: a repeated problem is logged once per period, with a count."""

import logging
import threading
import time
from typing import Callable, Dict, Tuple


class RateLimitedLog:
    """Logs each key at most once per period and says how many repeats were held back."""

    def __init__(self, logger: logging.Logger, period: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.period = period
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: Dict[str, Tuple[float, int]] = {}

    def log(self, level: int, key: str, message: str) -> bool:
        """Log message under key unless it was logged within the period; True if logged."""
        now = self._clock()
        with self._lock:
            last, held = self._seen.get(key, (None, 0))
            if last is not None and now - last < self.period:
                self._seen[key] = (last, held + 1)
                return False
            self._seen[key] = (now, 0)
        if held:
            message = f'{message} ({held} more like this in the last {now - last:.0f} s)'
        self.logger.log(level, message)
        return True

    def warning(self, key: str, message: str) -> bool:
        return self.log(logging.WARNING, key, message)

    def error(self, key: str, message: str) -> bool:
        return self.log(logging.ERROR, key, message)
