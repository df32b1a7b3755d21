"""Convention checks judged in a thread of their own, off the per-frame path."""

import logging
import threading
from typing import List

from ardupilot_json_bridge.checks.conventions import ConventionChecker
from ardupilot_json_bridge.checks.verdicts import Check, WRONG
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog

# A rolling window (s), judged every period (s).
LIVE_WINDOW = 10.0
LIVE_PERIOD = 5.0
# At most one line per this many seconds about a judgement that failed.
FAILURE_PERIOD = 60.0


class LiveConventions:
    """
    Judges a checker every period seconds in a thread of its own, off the per-frame path.

    Logs one WARN line with the fix when a check turns wrong (not again while it stays wrong),
    and one INFO line when the checks start over on a clock jump; `latest` holds the newest
    verdicts for diagnostics. No input stops the thread: a judgement that fails is logged
    (rate-limited) and the next one runs as usual.
    """

    def __init__(self, checker: ConventionChecker, logger: logging.Logger,
                 period: float = LIVE_PERIOD) -> None:
        self.checker = checker
        self.logger = logger
        self.period = period
        self.latest: List[Check] = []
        self._jumps_seen = 0
        self._failures = RateLimitedLog(logger, FAILURE_PERIOD)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='conventions', daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def judge(self) -> List[Check]:
        """Judge now; warn of each check that turned wrong since the last judgement."""
        jump = self.checker.last_jump
        if self.checker.jump_count != self._jumps_seen and jump is not None:
            self._jumps_seen = self.checker.jump_count
            before, after = jump
            self.logger.info(f'conventions: the stamps jumped back from {before:.3f} to '
                             f'{after:.3f} s (a reset or a loop): the checks start over')
            self.latest = [c for c in self.latest if c.verdict != WRONG]
        before = {c.name for c in self.latest if c.verdict == WRONG}
        checks = self.checker.checks()
        for check in checks:
            if check.verdict == WRONG and check.name not in before:
                self.logger.warning(f'conventions: {check.name} is wrong ({check.measured}); '
                                    f'fix: {check.fix}')
        self.latest = checks
        return checks

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.judge()
            except Exception as error:  # noqa: B902 (no sample may end the checks)
                self._failures.warning('judge', f'conventions: no judgement this time, the '
                                                f'checks carry on: {error!r}')
                self.logger.debug('conventions: judgement failed', exc_info=True)
