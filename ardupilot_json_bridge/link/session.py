"""
One SITL session: what each frame_count means, and the session's physics clock.

SITL increments frame_count only after it accepted a reply, and reads ONE datagram a frame
(SIM_JSON.cpp recv_fdm): a second reply to a frame is read as the next frame's, silently, and
every reply after it one frame late. So a repeated count is answered again only when it is
SITL's resend (it resends after RESEND_INTERVAL without a reply, so its reply was lost); a
sooner copy (the wire's, or a resend that crossed the reply) is counted and not answered. A
lower count is a restart only at frame 0 (a restarted SITL starts there); any other lower count
is a late or reordered datagram: counted, answered with nothing, changing nothing.

Timestamps count from the first instant served in the session, so SITL's clock starts at 0 and
never sees epoch time.

On the frame grid (free-running sources), reply k describes the source instant
origin + k / frame_rate and carries the timestamp k / frame_rate; a change of SITL's frame
rate re-bases the grid at the current instant. Every step is one frame period, or at most
MAX_STEP periods while SITL catches up with a source that ran ahead.
"""

from dataclasses import dataclass
import enum
import math
from typing import Optional

DEFAULT_FRAME_RATE = 1200
# SIM_JSON.cpp recv_fdm waits UDP_TIMEOUT_MS (100 ms) a receive and resends its servo packet
# when the waits add up to more than 1000 ms: 1.1 s after it sent the frame.
RESEND_INTERVAL = 1.1
# A repeat sooner than this after the frame's reply is no resend of SITL's; a frame 0 sooner
# than this after the session's first frame is no restart (SITL takes seconds to start).
RESEND_MIN = RESEND_INTERVAL / 2
MAX_STEP = 2     # frames one reply may advance while SITL catches up with its source
PASS_OVER = 4    # backlogs (max_backlog) beyond which physics is passed over instead


def frame_period(frame_rate: int) -> float:
    """Return the seconds of physics a frame at frame_rate asks (SITL's default where 0)."""
    return 1.0 / (frame_rate or DEFAULT_FRAME_RATE)


class FrameKind(enum.Enum):
    """How a servo packet relates to the ones before it in this session."""

    FIRST = 'first'
    NEW = 'new'
    RETRY = 'retry'            # same count as the last packet, which got no reply
    RESENT = 'resent'          # same count, answered RESEND_MIN or more ago: SITL's resend
    DUPLICATE = 'duplicate'    # same count, answered sooner: a copy, not to be answered
    LATE = 'late'              # lower count, not a restart: late or reordered, ignored
    RESTART = 'restart'        # frame 0 after later frames: SITL started again


@dataclass(slots=True)
class FrameVerdict:
    """A packet's kind, and how many frame counts went missing before it."""

    kind: FrameKind
    lost: int = 0


class FrameGrid:
    """
    SITL's frame instants in source time, and their session timestamps.

    SITL sets its frame rate from each timestamp step it receives (1 / step, SIM_JSON.cpp),
    reports that rate back in its servo packets, and from there moves back towards SIM_RATE_HZ
    by only 1 Hz a frame. So a reply never steps SITL's clock by more than MAX_STEP frames: a
    jump of tens of ms would set SITL to tens of Hz, and a grid following the packets' rate
    would keep it there for seconds. Nor does the grid follow a rate that only echoes one of
    its own longer steps.
    """

    __slots__ = ('base_stamp', 'base_timestamp', 'rate', 'index', 'step', 'last_step',
                 'passed_over')

    def __init__(self, stamp: float, rate: int) -> None:
        """Start a grid whose first frame is at source time stamp and session time 0."""
        self.base_stamp = stamp
        self.base_timestamp = 0.0
        self.rate = rate or DEFAULT_FRAME_RATE
        self.index = -1
        self.step = 1              # frames the next reply advances
        self.last_step = 1         # frames the last reply advanced
        self.passed_over = 0.0     # source seconds passed over: how far SITL's clock lags

    def next_instant(self, rate: int) -> float:
        """Return the source instant of the next reply, re-basing first if SITL's rate changed."""
        rate = rate or DEFAULT_FRAME_RATE
        if rate != self.rate and self.index < 0:
            self.rate = rate
        elif rate != self.rate and self.last_step == 1:
            self.base_stamp = self.stamp_of(self.index)
            self.base_timestamp = self.timestamp_of(self.index)
            self.rate, self.index = rate, 0
        return self.stamp_of(self.index + self.step)

    def next_timestamp(self) -> float:
        """Return the session timestamp of the next reply."""
        return self.timestamp_of(self.index + self.step)

    def stamp_of(self, index: int) -> float:
        return self.base_stamp + index / self.rate

    def timestamp_of(self, index: int) -> float:
        return self.base_timestamp + index / self.rate

    def catch_up(self, newest: float, max_backlog: float) -> int:
        """
        Choose the next reply's step from how far the source's newest sample is ahead.

        More than max_backlog ahead, replies step MAX_STEP frames until the next one would
        pass the newest sample: SITL's clock catches up with the source's, and SITL's frame
        rate drops to no less than 1 / MAX_STEP of its own meanwhile. More than PASS_OVER
        times max_backlog ahead (SITL keeps up with not even that), physics is passed over
        instead (skip_to). Returns the frames passed over.
        """
        backlog = newest - self.stamp_of(self.index + 1)
        if self.index < 0 or backlog > PASS_OVER * max_backlog:
            self.step = 1
            return self.skip_to(newest) if backlog > max_backlog else 0
        room = backlog >= (MAX_STEP - 1) / self.rate
        self.step = MAX_STEP if room and (backlog > max_backlog or self.step > 1) else 1
        return 0

    def skip_to(self, stamp: float) -> int:
        """
        Move the next frame's source instant to the last grid instant at or before stamp.

        Returns the frames passed over. The timestamps do not move (SITL's clock steps one
        frame): SITL's clock falls behind the source's by the frames passed over, as a slow
        SITL's does anyway. Before any frame is answered none is passed over: the grid starts
        again at stamp, so the session's first reply is still time 0.
        """
        if self.index < 0:
            self.base_stamp = stamp
            return 0
        frames = math.floor((stamp - self.stamp_of(self.index + 1)) * self.rate + 1e-9)
        if frames > 0:
            self.base_stamp += frames / self.rate
            self.passed_over += frames / self.rate
            return frames
        return 0

    def restart_at(self, stamp: float) -> None:
        """Carry on from stamp next frame: the source's clock jumped (a simulation reset)."""
        self.base_stamp = stamp - 1.0 / self.rate
        self.base_timestamp = self.timestamp_of(self.index)
        self.index, self.step = 0, 1

    def advance(self) -> float:
        """Record that the next reply was sent, and return its timestamp."""
        self.index += self.step
        self.last_step = self.step
        return self.timestamp_of(self.index)


class SitlSession:
    """Frame bookkeeping and time origin of the SITL peer the link is locked to."""

    def __init__(self) -> None:
        self.last_frame: Optional[int] = None
        self.started = 0.0                     # arrival of the session's first frame
        self.last_reply: Optional[bytes] = None
        self.replied_frame: Optional[int] = None
        self.replied_at: Optional[float] = None  # when the last reply went out
        self.served_sequence = 0
        self.origin: Optional[float] = None
        self.last_stamp: Optional[float] = None
        self.last_timestamp = 0.0
        self.last_step = 0.0
        self.grid: Optional[FrameGrid] = None
        self.resets = 0

    def reset(self) -> None:
        """Forget everything: the next packet starts a new session at time 0."""
        self.__init__()

    def classify(self, frame_count: int, now: float) -> FrameVerdict:
        """Classify a packet's frame_count, arrived at monotonic time now, and remember it."""
        last = self.last_frame
        if last is None:
            self.last_frame, self.started = frame_count, now
            return FrameVerdict(FrameKind.FIRST)
        if frame_count == last:
            if self.replied_frame != frame_count:
                return FrameVerdict(FrameKind.RETRY)
            if now - self.replied_at >= RESEND_MIN:
                return FrameVerdict(FrameKind.RESENT)
            return FrameVerdict(FrameKind.DUPLICATE)
        if frame_count < last:
            if frame_count == 0 and now - self.started >= RESEND_MIN:
                return FrameVerdict(FrameKind.RESTART)
            return FrameVerdict(FrameKind.LATE)
        self.last_frame = frame_count
        return FrameVerdict(FrameKind.NEW, lost=frame_count - last - 1)

    def timestamp_for(self, stamp: float) -> Optional[float]:
        """
        Session time of a sample's stamp (samples pacing); None if not newer than the last.

        A source clock that jumps back (a simulation reset, a looping bag) is re-based so
        SITL's clock keeps running forward by the last step.
        """
        if self.origin is None:
            self.origin = stamp
        elif stamp == self.last_stamp:
            return None
        elif self.last_stamp is not None and stamp < self.last_stamp:
            self.origin = stamp - (self.last_timestamp + (self.last_step or 1e-3))
        return stamp - self.origin

    def record_reply(self, frame_count: int, reply: bytes, sequence: int, stamp: float,
                     timestamp: float, previous_timestamp: float = math.nan) -> None:
        """
        Remember what answered frame_count, for duplicates and the next timestamp.

        previous_timestamp: the reply's before it, where those between were not recorded
        (frames answered in C, recorded a batch at a time).
        """
        if not math.isnan(previous_timestamp):
            self.last_timestamp = previous_timestamp
        if self.last_stamp is not None and timestamp > self.last_timestamp:
            self.last_step = timestamp - self.last_timestamp
        self.replied_frame = frame_count
        self.last_reply = reply
        self.served_sequence = sequence
        self.last_stamp = stamp
        self.last_timestamp = timestamp
