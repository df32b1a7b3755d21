"""
Which instant of the SensorState answers SITL's next frame, waited for up to a timeout.

Grid pacing (free-running sources: ROS topics, bags, FDMData) answers frame k from the source
instant on SITL's frame grid (session.FrameGrid), catching up, or passing physics over, when
SITL falls behind. Sample pacing (a lock-step source the state answers: reply-first, the
node's link process) answers from the next sample pushed. Either says in one line,
rate-limited, when physics time goes back or SITL cannot keep up. A lock-step engine's own
Instant needs neither: the link answers it at once.
"""

from typing import Callable, Optional, Tuple, Union

from ardupilot_json_bridge.core.protocol import ServoPacket
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.state import Instant, SensorState, Unavailable
from ardupilot_json_bridge.core.stats import LinkStats
from ardupilot_json_bridge.link.session import FrameGrid, MAX_STEP, SitlSession

# Lock-step through ROS: told the source instant a frame is about to wait for (None: any
# sample, before the first), so that the simulator can be stepped to it.
WaitCallback = Callable[[Optional[float]], None]
# The instant to answer a frame with, and the session timestamp it carries.
Answer = Tuple[Instant, float]

WHAT_TO_CHANGE = ('give them more CPU (fewer busy processes than cores), lower SIM_RATE_HZ (not '
                  "below the vehicle's loop rate, 400 for Copter) or run the simulator slower "
                  'than real time')


def falling_behind(grid: FrameGrid, backlog: float, passed: int, max_backlog: float) -> str:
    """Say in one line that SITL could not keep up with the source, and what to change."""
    if not passed:
        return (f'SITL fell {backlog:.3f} s behind physics (max_backlog {max_backlog} s): '
                f'catching up {MAX_STEP} frames a reply, so its clock keeps up with the '
                f'simulator while its frame rate drops to 1/{MAX_STEP}. SITL and the bridge are '
                f'not keeping up: {WHAT_TO_CHANGE}')
    return (f'SITL fell {backlog:.3f} s behind physics, too far to catch up {MAX_STEP} frames a '
            f'reply: passed over {passed} frame(s) ({passed / grid.rate:.3f} s) of physics, '
            "SITL's clock still stepping one frame at a time; it now runs "
            f'{grid.passed_over:.2f} s behind the simulator. SITL and the bridge cannot keep '
            f'up: {WHAT_TO_CHANGE}')


class StatePacing:
    """Picks and waits for the state's instant for each frame of one link's session."""

    def __init__(self, state: SensorState, session: SitlSession, stats: LinkStats,
                 warnings: RateLimitedLog, prefix: str, clock: Callable[[], float],
                 on_wait: Optional[WaitCallback] = None) -> None:
        """on_wait, on the grid, is told each instant a frame is about to wait for."""
        self.state = state
        self.session = session
        self.stats = stats
        self.warnings = warnings
        self.on_wait = on_wait
        self._prefix = prefix
        self._clock = clock

    def next_answer(self, packet: ServoPacket, timeout: float) -> Union[Answer, Unavailable]:
        """Return the instant packet's frame is answered with, and its timestamp."""
        if self.state.grid:
            return self._grid_instant(packet, timeout)
        return self._sample_instant(timeout)

    def _grid_instant(self, packet: ServoPacket, timeout: float) -> Union[Answer, Unavailable]:
        """
        Return the instant of SITL's next frame on the grid, and its timestamp.

        A clock jump back while the frame waits restarts the grid and the wait at once.
        """
        deadline = self._clock() + timeout
        while True:
            result = self._grid_attempt(packet, max(0.0, deadline - self._clock()))
            if not (isinstance(result, Unavailable) and self.session.resets != self.state.resets):
                return result

    def _grid_attempt(self, packet: ServoPacket, timeout: float) -> Union[Answer, Unavailable]:
        """One wait for the next grid instant; ends early if the source's clock jumps back."""
        state, session = self.state, self.session
        grid = session.grid
        if grid is None or session.resets != state.resets:
            if state.newest_primary() is None:
                self._wait_for(None)
            newest = state.wait_for_primary(timeout)
            if newest is None:
                return state.not_received(state.primary)
            if grid is None:
                grid = session.grid = FrameGrid(newest, packet.frame_rate)
            else:
                # From the last stamp served; before any reply, the instant SITL asked for.
                before = session.last_stamp
                self._went_back(grid.stamp_of(grid.index + 1) if before is None else before,
                                newest)
                grid.restart_at(newest)
            session.resets = state.resets
        stamp = grid.next_instant(packet.frame_rate)
        newest = state.newest_primary()
        if newest is not None:
            catching = grid.step > 1
            passed = grid.catch_up(newest, state.settings.max_backlog)
            if passed or (grid.step > 1 and not catching):
                self.stats.skipped += passed
                message = falling_behind(grid, newest - stamp, passed,
                                         state.settings.max_backlog)
                self.warnings.warning('skipped' if passed else 'behind', self._prefix + message)
            stamp = grid.next_instant(packet.frame_rate)
        self._wait_for(stamp)
        result = state.wait_for_stamp(stamp, timeout, session.resets)
        if isinstance(result, Unavailable):
            return result
        return result, grid.next_timestamp()

    def _wait_for(self, stamp: Optional[float]) -> None:
        """Tell on_wait the instant a frame waits for; a failure is said and waited out."""
        if self.on_wait is None:
            return
        try:
            self.on_wait(stamp)
        except Exception as error:
            self.warnings.error('on_wait', f'{self._prefix}asking for physics at the instant '
                                           f'SITL waits for failed: {error!r}')

    def _sample_instant(self, timeout: float) -> Union[Answer, Unavailable]:
        """Return the next primary sample's instant (lock-step sources), and its timestamp."""
        state, session = self.state, self.session
        deadline = self._clock() + timeout
        after = session.served_sequence
        while True:
            result = state.wait_for_sample(after, max(0.0, deadline - self._clock()))
            if isinstance(result, Unavailable):
                if result.sequence:
                    # A sample that cannot be served (no odometry near it) is passed over, so
                    # a lock-step source moves on to the next one instead of waiting for good.
                    session.served_sequence = result.sequence
                    state.mark_served(result.sequence)
                    self.stats.skipped += 1
                return result
            if session.last_stamp is not None and result.stamp < session.last_stamp:
                self._went_back(session.last_stamp, result.stamp)
            timestamp = session.timestamp_for(result.stamp)
            if timestamp is not None:
                break
            after = result.sequence
        if result.skipped:
            self.stats.skipped += result.skipped
            self.warnings.warning('skipped', f'{self._prefix}SITL fell more than '
                                             f'{state.settings.max_backlog} s behind physics: '
                                             f'skipped {result.skipped} sample(s) to catch up')
        return result, timestamp

    def _went_back(self, before: float, after: float) -> None:
        """Warn (rate-limited) that physics time went back, or that it alternates two clocks."""
        two_clocks = self.state.two_clocks
        if two_clocks is not None:
            ahead, behind = two_clocks
            self.warnings.warning('two_clocks', f'{self._prefix}{self.state.primary} stamps '
                                                f'alternate between two clocks, {ahead:.3f} and '
                                                f'{behind:.3f} s (two publishers on one topic?): '
                                                'each jump back restarts the physics time '
                                                'served; publish one clock')
            return
        self.warnings.warning('went_back', f'{self._prefix}physics time went back from '
                                           f'{before:.3f} to {after:.3f} s (simulation reset or '
                                           'looping bag): SITL time carries on from where it was')
