"""Counters and meters of the link and its inputs, read by diagnostics and the runner."""

from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, Sequence, Tuple

LATENCY_WINDOW = 2048
RATE_SMOOTHING = 0.05
# A stamp gap this many periods long or more skips messages; one longer than MAX_DROP_GAP (s)
# is a pause or a jump of the source, not drops.
STEP_TOLERANCE = 1.5
MAX_DROP_GAP = 1.0
# A fixed-rate source's period is the median of its last STEP_WINDOW stamp gaps: one stamp
# early or late (jitter, a simulator catching up) does not move it, a change of rate does.
STEP_WINDOW = 15


class InputMeter:
    """Arrival rate and age of one input, from the monotonic times of its messages."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.rejected = 0
        self.out_of_order = 0
        self.used = 0
        self.left_out = 0
        # Physics time served minus the stamp of the sample last left out (s).
        self.left_out_gap: Optional[float] = None
        # SITL frames left unanswered for this input, the latest reason, and whether waiting
        # cannot mend it (inputs on two clocks).
        self.unanswered = 0
        self.fault: Optional[str] = None
        self.fault_is_error = False
        self.last_arrival: Optional[float] = None
        self._interval: Optional[float] = None
        # Of a fixed-rate source (IMU, odometry): its period by its stamps (the median of the
        # recent gaps), and the messages its stamps say never arrived (note_stamp_gap).
        self.stamp_step: Optional[float] = None
        self._stamp_gaps: Deque[float] = deque(maxlen=STEP_WINDOW)
        self.missed = 0

    def record(self, arrival: float, count: int = 1) -> None:
        """Count count messages, the newest arrived at monotonic time arrival, evenly spaced."""
        if self.last_arrival is not None:
            interval = (arrival - self.last_arrival) / count
            if self._interval is None:
                self._interval = interval
            else:
                self._interval += RATE_SMOOTHING * (interval - self._interval)
        self.count += count
        self.last_arrival = arrival

    def note_stamp_gap(self, gap: float) -> None:
        """
        Count the messages a gap between consecutive stamps of a fixed-rate source skips.

        Subscriptions drop silently (a best-effort queue overflowing while the executor lags,
        a lost datagram): the stamps are where it shows. A gap over MAX_DROP_GAP is a pause or
        a jump, not drops.
        """
        if gap <= 0.0 or gap > MAX_DROP_GAP:
            return
        gaps = self._stamp_gaps
        gaps.append(gap)
        self.stamp_step = sorted(gaps)[len(gaps) // 2]
        if gap > STEP_TOLERANCE * self.stamp_step:
            self.missed += round(gap / self.stamp_step) - 1

    def rate(self) -> float:
        """Messages per second, smoothed; 0 before two messages."""
        if not self._interval or self._interval <= 0.0:
            return 0.0
        return 1.0 / self._interval

    def age(self, now: float) -> Optional[float]:
        """Seconds since the last message, None if none came."""
        return None if self.last_arrival is None else now - self.last_arrival


class LatencyWindow:
    """The most recent reply latencies, for percentiles without unbounded memory."""

    def __init__(self, size: int = LATENCY_WINDOW) -> None:
        self._values: List[float] = [0.0] * size
        self._next = 0
        self._filled = 0

    def add(self, seconds: float) -> None:
        self._values[self._next] = seconds
        self._next = (self._next + 1) % len(self._values)
        self._filled = min(self._filled + 1, len(self._values))

    def extend(self, values: Sequence[float]) -> None:
        """Add each of values, oldest first (as many add calls would, in two slices)."""
        size = len(self._values)
        kept = list(values[-size:])
        count = len(kept)
        first = min(count, size - self._next)
        self._values[self._next:self._next + first] = kept[:first]
        self._values[:count - first] = kept[first:]
        self._next = (self._next + count) % size
        self._filled = min(self._filled + count, size)

    def percentile(self, fraction: float) -> Optional[float]:
        if not self._filled:
            return None
        ordered = sorted(self._values[:self._filled])
        return ordered[min(self._filled - 1, int(fraction * self._filled))]


@dataclass
class LinkStats:
    """What the link has seen: the one object diagnostics and the runner's summary read."""

    received: int = 0
    replied: int = 0
    new_frames: int = 0
    # New frames answered on arrival with a reply encoded ahead (a lock-step engine's guess).
    answered_on_arrival: int = 0
    # Faults of the wire and of SITL's session, each counted apart:
    # late: a lower frame_count that is no restart (late or reordered), not answered;
    # duplicates: a repeat of the frame answered, too soon to be SITL's resend, not answered;
    # resent: SITL's resend of the frame answered (its reply was lost), answered again;
    # lost: frame_count gaps (frames SITL sent that never arrived; a reordered one counts too);
    # strangers: servo packets from another address while the link is locked to its SITL.
    late: int = 0
    duplicates: int = 0
    resent: int = 0
    lost: int = 0
    restarts: int = 0
    rejected: int = 0
    strangers: int = 0
    unanswered: int = 0
    skipped: int = 0
    channel_count: int = 0
    frame_rate_hint: int = 0
    peer: Optional[Tuple[str, int]] = None
    last_packet: Optional[float] = None
    latency: LatencyWindow = field(default_factory=LatencyWindow)

    def summary(self) -> Dict[str, object]:
        """Return a plain dict of the counters and latency percentiles, in microseconds."""
        p50, p99 = self.latency.percentile(0.5), self.latency.percentile(0.99)
        return {
            'received': self.received, 'replied': self.replied,
            'new_frames': self.new_frames, 'answered_on_arrival': self.answered_on_arrival,
            'late': self.late, 'duplicates': self.duplicates, 'resent': self.resent,
            'lost': self.lost, 'restarts': self.restarts, 'rejected': self.rejected,
            'strangers': self.strangers, 'unanswered': self.unanswered,
            'skipped': self.skipped,
            'channels': self.channel_count,
            'peer': None if self.peer is None else f'{self.peer[0]}:{self.peer[1]}',
            'latency_p50_us': None if p50 is None else round(p50 * 1e6, 1),
            'latency_p99_us': None if p99 is None else round(p99 * 1e6, 1),
        }
