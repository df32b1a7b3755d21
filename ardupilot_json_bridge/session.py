"""One SITL session: what each frame_count means and the session's physics clock.

SITL increments frame_count only after it accepted a reply, so a repeated count asks for the
last reply again and a lower count means SITL restarted. Timestamps count from the first
instant served in the session, so SITL's clock starts at 0 and never sees epoch time.
"""

from dataclasses import dataclass
import enum
from typing import Optional


class FrameKind(enum.Enum):
    """How a servo packet relates to the ones before it in this session."""

    FIRST = 'first'
    NEW = 'new'
    RETRY = 'retry'            # same count as the last packet, which got no reply
    DUPLICATE = 'duplicate'    # same count as the last packet, which got a reply
    RESTART = 'restart'        # lower count: SITL started again


@dataclass(slots=True)
class FrameVerdict:
    kind: FrameKind
    lost: int = 0


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
        """Session time of a source stamp; None if it is not newer than the last one served.

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
