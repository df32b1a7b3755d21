"""
A faulty wire between SITL and the bridge, for tests: a seeded UDP relay with faults.

It delays, drops, duplicates and reorders datagrams in both directions, and records what it
passes.

SITL sends its servo packets to the relay's port (SITL's own 9002 + 10 N); the relay sends them
on to the bridge's port from a socket of its own and carries the bridge's replies back to
SITL's address. Each datagram is held delay +- jitter (uniform); with probability loss it is
dropped, with probability duplication a second copy follows up to REORDER_HOLD later, so that
it lands after datagrams sent behind it (reordering). The kernels here have no netem, hence
this.

reply_duplication (the duplication of the bridge's replies to SITL; by default the same) can be
set apart, because a copy of a reply is a fault SITL itself cannot survive: it reads one
datagram a frame and matches no reply to its frame (SIM_JSON.cpp recv_fdm), so it takes the
copy as the next frame's reply, and every reply after it one frame late, for good; a copy
landing behind a later reply reads as time going back ("Detected physics reset"). No backend
can undo that on its side of the wire.

It records every servo packet it hands the bridge (its frame count) and every reply the bridge
sends (its timestamp), in the order it saw them; wrong_answers() reads that record as SITL
would need it answered (see there).
"""

from dataclasses import dataclass, field
import heapq
import math
import random
import socket
import struct
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

from sitl_peer import parse_reply

REORDER_HOLD = 0.010
MAX_DATAGRAM = 65536
# How many servo packets before a reply the reply may answer: the bridge answers in
# microseconds, but a busy machine can let the relay hand over the next packets first.
ANSWER_WINDOW = 4
Address = Tuple[str, int]


@dataclass
class Faults:
    """What the relay did to one direction's datagrams."""

    passed: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0   # delivered after a datagram that came to the relay later


@dataclass
class Record:
    """The bridge side of the wire, in order (see wrong_answers)."""

    events: List[Tuple[str, float, bool]] = field(default_factory=list)


class FaultyRelay:
    """A seeded faulty UDP relay: listen is where SITL sends, bridge where the bridge listens."""

    def __init__(self, listen: Address, bridge: Address, seed: int, delay: float = 0.002,
                 jitter: float = 0.001, loss: float = 0.01, duplication: float = 0.01,
                 reply_duplication: Optional[float] = None) -> None:
        self.bridge = bridge
        self.delay, self.jitter, self.loss = delay, jitter, loss
        self.duplication = {'to_bridge': duplication, 'to_sitl': duplication
                            if reply_duplication is None else reply_duplication}
        self.random = random.Random(seed)
        # Off: every datagram passes at once (a flight boots and climbs on a sound wire, then
        # meets the faults in its hover: see test_faulty_wire).
        self.faulty = True
        self.sitl_side = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sitl_side.bind(listen)
        self.bridge_side = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.bridge_side.bind((bridge[0], 0))
        self.sitl: Optional[Address] = None
        self.faults: Dict[str, Faults] = {'to_bridge': Faults(), 'to_sitl': Faults()}
        self.record = Record()
        self._queue: List[Tuple[float, int, str, bytes, bool]] = []
        self._sequence = 0
        self._delivered: Dict[str, int] = {'to_bridge': -1, 'to_sitl': -1}
        self._lock = threading.Condition()
        self._running = True
        self._threads = [threading.Thread(target=self._receive, args=(sock, way), daemon=True)
                         for sock, way in ((self.sitl_side, 'to_bridge'),
                                           (self.bridge_side, 'to_sitl'))]
        self._threads.append(threading.Thread(target=self._send, daemon=True))
        for thread in self._threads:
            thread.start()

    def _receive(self, sock: socket.socket, way: str) -> None:
        while self._running:
            try:
                data, sender = sock.recvfrom(MAX_DATAGRAM)
            except OSError:
                return
            if not self._running:
                return
            if way == 'to_bridge':
                self.sitl = sender
            elif sender[:2] != self.bridge[:2]:
                continue   # not the bridge: another test's peer aiming at a port it once had
            else:
                self._note('reply', data, False)
            self._schedule(way, data)

    def _schedule(self, way: str, data: bytes) -> None:
        """Queue data for its delivery time, or drop it; perhaps a late second copy."""
        faults = self.faults[way]
        with self._lock:
            self._sequence += 1
            sequence = self._sequence
            faulty = self.faulty
            if faulty and self.random.random() < self.loss:
                faults.lost += 1
                return
            now = time.monotonic()
            due = now + (self.delay + self.random.uniform(-self.jitter, self.jitter)
                         if faulty else 0.0)
            heapq.heappush(self._queue, (due, sequence, way, data, False))
            if faulty and self.random.random() < self.duplication[way]:
                faults.duplicated += 1
                late = due + self.random.uniform(0.0, REORDER_HOLD)
                heapq.heappush(self._queue, (late, sequence, way, data, True))
            self._lock.notify()

    def _send(self) -> None:
        """Deliver queued datagrams when due; wait (no polling) until the next one is."""
        while True:
            with self._lock:
                while self._running and (not self._queue
                                         or self._queue[0][0] > time.monotonic()):
                    self._lock.wait(self._queue[0][0] - time.monotonic()
                                    if self._queue else None)
                if not self._running:
                    return
                _, sequence, way, data, copy = heapq.heappop(self._queue)
                faults = self.faults[way]
                faults.passed += 1
                if sequence < self._delivered[way]:
                    faults.reordered += 1
                self._delivered[way] = max(self._delivered[way], sequence)
            try:
                if way == 'to_bridge':
                    self._note('frame', data, copy)
                    self.bridge_side.sendto(data, self.bridge)
                elif self.sitl is not None:
                    self.sitl_side.sendto(data, self.sitl)
            except OSError:
                pass   # the bridge or SITL is gone: the test is ending

    def _note(self, kind: str, data: bytes, copy: bool) -> None:
        if kind == 'frame':
            value = float(struct.unpack_from('<I', data, 4)[0]) if len(data) >= 8 else -1.0
        else:
            try:
                value = float(parse_reply(data)['timestamp'])
            except (ValueError, KeyError):
                value = float('nan')   # no reply SITL could read: wrong_answers names it
        with self._lock:
            self.record.events.append((kind, value, copy))

    def wrong_answers(self) -> List[str]:
        """Each reply the bridge sent that answers no frame SITL waits for (wrong_answers)."""
        with self._lock:
            return wrong_answers(list(self.record.events))

    def close(self) -> None:
        with self._lock:
            self._running = False
            self._lock.notify()
        for sock in (self.sitl_side, self.bridge_side):
            try:
                sock.sendto(b'', sock.getsockname())   # wakes its receiving thread
            except OSError:
                pass
        for thread in self._threads:
            thread.join(2.0)
        for sock in (self.sitl_side, self.bridge_side):
            sock.close()

    def __enter__(self) -> 'FaultyRelay':
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def wrong_answers(events: Sequence[Tuple[str, float, bool]]) -> List[str]:
    """
    Each reply that answers no frame SITL waits for, in a line; none is right.

    events: the bridge side of the wire in order, ('frame', count, copy) for each servo packet
    handed to the bridge (copy: the wire's second copy, not a packet SITL sent) and ('reply',
    timestamp, False) for each reply the bridge sent. A reply is right when it is new and
    answers a frame newer than every frame answered (its timestamp later than every reply's),
    or repeats the reply to the newest frame because SITL sent that frame again (SITL reads
    one datagram a frame: it may have as many replies to a frame as it sent the frame).
    Wrong: a reply to a late frame (an older count: SITL would take it as the next frame's),
    a timestamp going back (a false restart), a new reply with no new frame to answer, a
    reply to the wire's copy of a frame already answered.
    """
    wrong: List[str] = []
    frames: List[int] = []
    sent: Dict[int, int] = {}        # SITL's own packets of each count handed over
    answered: Dict[int, float] = {}
    replies = 0                      # replies to the newest frame answered
    newest = -1
    for index, (kind, value, copy) in enumerate(events):
        if kind == 'frame':
            frames.append(int(value))
            if not copy:
                sent[int(value)] = sent.get(int(value), 0) + 1
            continue
        recent = frames[-ANSWER_WINDOW:]
        if math.isnan(value):
            wrong.append(f'event {index}: a reply SITL could not read after frames {recent}')
            continue
        if newest >= 0 and value == answered[newest] and newest in recent:
            replies += 1
            if replies <= sent[newest]:
                continue
            wrong.append(f'event {index}: reply {replies} to frame {newest}, which SITL sent '
                         f'{sent[newest]} time(s) (the others were copies the wire made)')
            continue
        newer = [count for count in recent if count > newest]
        if newer and (newest < 0 or value > answered[newest]):
            newest = min(newer)
            answered[newest] = value
            replies = 1
            continue
        last = 'none' if newest < 0 else f'{answered[newest]!r} to frame {newest}'
        wrong.append(f'event {index}: reply at timestamp {value!r} after frames {recent} '
                     f'(the newest answered: {last})')
    return wrong
