"""
Diagnostic statuses of the link and its inputs, with levels a user can act on.

Pure: the node turns these into diagnostic_msgs/DiagnosticArray; tests read them directly.
"""

from dataclasses import dataclass, field
import enum
from typing import Dict, List, Optional, Sequence

from ardupilot_json_bridge.checks.verdicts import Check, UNDECIDED, WRONG
from ardupilot_json_bridge.core.clocks import CLOCK_MISMATCH
from ardupilot_json_bridge.core.settings import LinkSettings
from ardupilot_json_bridge.core.stats import InputMeter, LinkStats

STALLED_AFTER = 2.0
# LinkStats' counters of faults on the wire and in SITL's session, as /diagnostics names them.
WIRE_FAULTS = ('late', 'duplicates', 'resent', 'lost', 'strangers')
STALE_INPUT_AFTER = 1.0


class Level(enum.IntEnum):
    """diagnostic_msgs/DiagnosticStatus levels."""

    OK = 0
    WARN = 1
    ERROR = 2
    STALE = 3


@dataclass(frozen=True)
class Status:
    level: Level
    name: str
    message: str
    values: Dict[str, str] = field(default_factory=dict)


def _microseconds(seconds: Optional[float]) -> str:
    return 'n/a' if seconds is None else f'{seconds * 1e6:.0f}'


class BridgeMonitor:
    """Statuses of the link and each input; judges counters by what changed since last time."""

    def __init__(self, settings: LinkSettings, prefix: str, topics: Dict[str, str],
                 mandatory: Sequence[str]) -> None:
        self.settings = settings
        self.prefix = prefix
        self.topics = topics
        self.mandatory = set(mandatory)
        self._replied = 0
        self._unanswered = 0
        self._faults = {name: 0 for name in WIRE_FAULTS}
        self._rejected: Dict[str, int] = {}
        self._left_out: Dict[str, int] = {}
        self._input_unanswered: Dict[str, int] = {}
        self._missed: Dict[str, int] = {}
        self._last_time: Optional[float] = None

    def statuses(self, stats: LinkStats, meters: Sequence[InputMeter], now: float,
                 conventions: Sequence[Check] = (), ended: Optional[str] = None) -> List[Status]:
        """Every status at monotonic time now; ended says why the link process ended."""
        link = self.link_status(stats, now, ended)
        inputs = [self.input_status(m, now) for m in meters if m.name in self.topics]
        return [link] + inputs + [self.conventions_status(conventions)]

    def conventions_status(self, checks: Sequence[Check]) -> Status:
        """Return the simulator's conventions as the live checks judge them (conventions.py)."""
        name = f'{self.prefix}: conventions'
        values = {c.name: f'{c.verdict}: {c.measured}' + (f' (fix: {c.fix})' if c.fix else '')
                  for c in checks}
        wrong = [c for c in checks if c.verdict == WRONG]
        if wrong:
            return Status(Level.WARN, name, '; '.join(f'{c.name}: {c.fix}' for c in wrong),
                          values)
        if not checks:
            return Status(Level.OK, name, 'not judged yet', values)
        undecided = sum(c.verdict == UNDECIDED for c in checks)
        return Status(Level.OK, name, f'{len(checks) - undecided} ok, {undecided} undecided '
                                      '(needs motion)', values)

    def link_status(self, stats: LinkStats, now: float, ended: Optional[str] = None) -> Status:
        elapsed = None if self._last_time is None else now - self._last_time
        rate = 0.0 if not elapsed else (stats.replied - self._replied) / elapsed
        newly_unanswered = stats.unanswered - self._unanswered
        faults = {name: getattr(stats, name) for name in WIRE_FAULTS}
        new_faults = [f'{faults[name] - self._faults[name]} {name}' for name in WIRE_FAULTS
                      if faults[name] > self._faults[name]]
        self._faults = faults
        self._replied, self._unanswered, self._last_time = stats.replied, stats.unanswered, now
        values = {
            'port': str(self.settings.listen_port), 'instance': str(self.settings.instance),
            'sitl_address': 'none' if stats.peer is None else f'{stats.peer[0]}:{stats.peer[1]}',
            'channels': str(stats.channel_count), 'frame_rate_hz': f'{rate:.1f}',
            'sitl_rate_hz': str(stats.frame_rate_hint),
            'replied': str(stats.replied), 'late': str(stats.late),
            'duplicates': str(stats.duplicates), 'resent': str(stats.resent),
            'lost': str(stats.lost), 'restarts': str(stats.restarts),
            'unanswered': str(stats.unanswered), 'skipped': str(stats.skipped),
            'rejected_datagrams': str(stats.rejected), 'strangers': str(stats.strangers),
            'latency_p50_us': _microseconds(stats.latency.percentile(0.5)),
            'latency_p99_us': _microseconds(stats.latency.percentile(0.99)),
        }
        name = f'{self.prefix}: SITL link'
        if ended is not None:
            return Status(Level.ERROR, name, ended, values)
        if stats.last_packet is None:
            return Status(Level.WARN, name, f'waiting for SITL on UDP port '
                                            f'{self.settings.listen_port} (sim_vehicle.py -I '
                                            f'{self.settings.instance} --model JSON:<this host>)',
                          values)
        silent = now - stats.last_packet
        if silent > STALLED_AFTER:
            return Status(Level.ERROR, name, f'stalled: no servo packet for {silent:.1f} s '
                                             '(SITL stopped or paused?)', values)
        if newly_unanswered:
            return Status(Level.WARN, name, f'connected, but {newly_unanswered} frame(s) went '
                                            'unanswered: see the inputs', values)
        if new_faults:
            return Status(Level.WARN, name, f'connected; since the last report the wire or '
                                            f'SITL gave {", ".join(new_faults)} frame(s): see '
                                            'the log', values)
        return Status(Level.OK, name, f'connected, {rate:.0f} frames/s', values)

    def input_status(self, meter: InputMeter, now: float) -> Status:
        age = meter.age(now)
        topic = self.topics[meter.name]
        values = {'topic': topic, 'rate_hz': f'{meter.rate():.1f}',
                  'age_s': 'never' if age is None else f'{age:.2f}',
                  'messages': str(meter.count), 'rejected': str(meter.rejected),
                  'used': str(meter.used), 'left_out': str(meter.left_out),
                  'unanswered_frames': str(meter.unanswered), 'missed': str(meter.missed)}
        name = f'{self.prefix}: input {meter.name}'
        newly_rejected = meter.rejected - self._rejected.get(meter.name, 0)
        self._rejected[meter.name] = meter.rejected
        newly_left_out = meter.left_out - self._left_out.get(meter.name, 0)
        self._left_out[meter.name] = meter.left_out
        newly_unanswered = meter.unanswered - self._input_unanswered.get(meter.name, 0)
        self._input_unanswered[meter.name] = meter.unanswered
        newly_missed = meter.missed - self._missed.get(meter.name, 0)
        self._missed[meter.name] = meter.missed
        missing = Level.ERROR if meter.name in self.mandatory else Level.WARN
        if age is None:
            return Status(missing, name, f'no messages on {topic}', values)
        if age > STALE_INPUT_AFTER:
            return Status(missing, name, f'stale: last message {age:.1f} s ago', values)
        if newly_unanswered:
            return Status(Level.ERROR if meter.fault_is_error else Level.WARN, name,
                          f'{newly_unanswered} SITL frame(s) unanswered: {meter.fault}', values)
        if newly_rejected:
            return Status(Level.WARN, name, f'{newly_rejected} invalid message(s) ignored '
                                            '(NaN or malformed)', values)
        if newly_missed:
            return Status(Level.WARN, name, f'{newly_missed} message(s) missing by the stamps '
                                            f'(one every {meter.stamp_step * 1e3:.3g} ms): '
                                            'dropped by a full subscription queue while the '
                                            'executor lagged, by the network, or never '
                                            'published', values)
        if newly_left_out:
            return Status(Level.WARN, name, f'{meter.rate():.0f} Hz received, but '
                                            f'{newly_left_out} time(s) left out of replies: '
                                            f'{left_out_reason(meter.left_out_gap)}', values)
        return Status(Level.OK, name, f'{meter.rate():.0f} Hz', values)


def left_out_reason(gap: Optional[float]) -> str:
    """Why an optional input's samples are too far from the physics time served."""
    if gap is None:
        return 'no sample near the physics time served'
    if abs(gap) > CLOCK_MISMATCH:
        return (f'its stamps are {-gap:+.0f} s from physics time, another clock (wall time '
                'against simulated time? start every node with use_sim_time:=true)')
    side = 'behind' if gap > 0 else 'ahead of'
    return (f'its latest sample is {abs(gap):.2f} s {side} physics time (more than '
            'max_optional_age): published too rarely, or stamped late')
