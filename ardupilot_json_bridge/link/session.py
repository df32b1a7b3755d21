"""
One SITL session: what each frame_count means, and the session's physics clock.

SITL increments frame_count only after it accepted a reply, so a repeated count asks for the
last reply again and a lower count means SITL restarted. Timestamps count from the first
instant served in the session, so SITL's clock starts at 0 and never sees epoch time.

On the frame grid (free-running sources), reply k describes the source instant
origin + k / frame_rate and carries the timestamp k / frame_rate; a change of SITL's frame
rate re-bases the grid at the current instant, and so does catching up with a source that ran
ahead (the source instant moves on, the timestamp does not), so every step is exactly one frame
period.
"""

from dataclasses import dataclass
import enum
import math
from typing import Optional

DEFAULT_FRAME_RATE = 1200


class FrameKind(enum.Enum):
    """How a servo packet relates to the ones before it in this session."""

    FIRST = 'first'
    NEW = 'new'
    RETRY = 'retry'            # same count as the last packet, which got no reply
    DUPLICATE = 'duplicate'    # same count as the last packet, which got a reply
    RESTART = 'restart'        # lower count: SITL started again


@dataclass(slots=True)
class FrameVerdict:
    """A packet's kind, and how many frame counts went missing before it."""

    kind: FrameKind
    lost: int = 0


class FrameGrid:
    """SITL's frame instants in source time, and their session timestamps."""

    __slots__ = ('base_stamp', 'base_timestamp', 'rate', 'index', 'passed_over')

    def __init__(self, stamp: float, rate: int) -> None:
        """Start a grid whose first frame is at source time stamp and session time 0."""
        self.base_stamp = stamp
        self.base_timestamp = 0.0
        self.rate = rate or DEFAULT_FRAME_RATE
        self.index = -1
        self.passed_over = 0.0     # source seconds skipped: how far SITL's clock lags the source

    def next_instant(self, rate: int) -> float:
        """Return the source instant of the next frame, re-basing first if the rate changed."""
        rate = rate or DEFAULT_FRAME_RATE
        if rate != self.rate and self.index < 0:
            self.rate = rate
        elif rate != self.rate:
            self.base_stamp = self.stamp_of(self.index)
            self.base_timestamp = self.timestamp_of(self.index)
            self.rate, self.index = rate, 0
        return self.stamp_of(self.index + 1)

    def stamp_of(self, index: int) -> float:
        return self.base_stamp + index / self.rate

    def timestamp_of(self, index: int) -> float:
        return self.base_timestamp + index / self.rate

    def skip_to(self, stamp: float) -> int:
        """
        Move the next frame's source instant to the last grid instant at or before stamp.

        Returns the frames passed over. The timestamps do not move: SITL's clock still steps
        by one frame, because SITL sets its frame rate from each step (1 / step, SIM_JSON.cpp),
        reports that rate back in its servo packets, and from there climbs back by only 1 Hz
        per frame; a jump of tens of ms would leave it at tens of Hz for seconds. SITL's clock
        falls behind the source's by the frames passed over, as a slow SITL's does anyway.
        Before any frame is answered none is passed over: the grid starts again at stamp, so
        the session's first reply is still time 0.
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
        self.index = 0

    def advance(self) -> float:
        """Record that the next frame was answered, and return its timestamp."""
        self.index += 1
        return self.timestamp_of(self.index)


class SitlSession:
    """Frame bookkeeping and time origin of the SITL peer the link is locked to."""

    def __init__(self) -> None:
        self.last_frame: Optional[int] = None
        self.last_reply: Optional[bytes] = None
        self.replied_frame: Optional[int] = None
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

    def classify(self, frame_count: int) -> FrameVerdict:
        """Classify a packet's frame_count and remember it."""
        last = self.last_frame
        self.last_frame = frame_count
        if last is None:
            return FrameVerdict(FrameKind.FIRST)
        if frame_count == last:
            if self.replied_frame == frame_count:
                return FrameVerdict(FrameKind.DUPLICATE)
            return FrameVerdict(FrameKind.RETRY)
        if frame_count < last:
            return FrameVerdict(FrameKind.RESTART)
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
                     timestamp: float) -> None:
        """Remember what answered frame_count, for duplicates and the next timestamp."""
        if self.last_stamp is not None and timestamp > self.last_timestamp:
            self.last_step = timestamp - self.last_timestamp
        self.replied_frame = frame_count
        self.last_reply = reply
        self.served_sequence = sequence
        self.last_stamp = stamp
        self.last_timestamp = timestamp
