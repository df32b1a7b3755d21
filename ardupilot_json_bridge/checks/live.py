"""Convention checks judged in a thread of their own, off the per-frame path."""

import logging
import threading
from typing import List

import numpy as np

from ardupilot_json_bridge.checks.conventions import ConventionChecker
from ardupilot_json_bridge.checks.verdicts import Check, WRONG

# A rolling window (s), judged every period (s).
LIVE_WINDOW = 10.0
LIVE_PERIOD = 5.0


class LiveConventions:
    """
    Judges a checker every period seconds in a thread of its own, off the per-frame path.

    Logs one WARN line with the fix when a check turns wrong (not again while it stays wrong);
    `latest` holds the newest verdicts for diagnostics.
    """

    def __init__(self, checker: ConventionChecker, logger: logging.Logger,
                 period: float = LIVE_PERIOD) -> None:
        self.checker = checker
        self.logger = logger
        self.period = period
        self.latest: List[Check] = []
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
            except (ValueError, FloatingPointError, np.linalg.LinAlgError) as error:
                self.logger.debug(f'conventions: no judgement this time: {error!r}')
