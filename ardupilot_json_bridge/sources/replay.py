"""
Bag replay: a recorded simulation as the physics source, paced by its own stamps.

With rate R > 0 messages are delivered at their log times divided by R (wall clock) and SITL
is served on its own frame grid; with R = 0 each primary sample waits until the link has
served the one before (every message in between delivered first, whatever the order of the
topics), so the bag plays as fast as SITL asks for frames, one sample per frame. The bag is
read lazily: memory does not grow with its length.

Looping shifts every stamp of the next pass by the span of the primary stamps plus one primary
step, so SITL's time runs on by one sample. Log times only order and pace the messages: a bag
recorded without --use-sim-time logs them at wall speed, which differs from the stamps' speed
whenever the simulator is not at real time, and `record -a` logs topics beyond the simulator's.
"""

import collections
from dataclasses import dataclass
import logging
import threading
import time
from typing import Deque, Dict, List, Optional, Sequence, Tuple

from ardupilot_json_bridge.checks.conventions import ConventionChecker
from ardupilot_json_bridge.config import check_number, Limits
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.state import SensorState
from ardupilot_json_bridge.messages.cdr_writer import CLOCK_TYPE
from ardupilot_json_bridge.messages.inputs import stamp_seconds, time_seconds
from ardupilot_json_bridge.messages.routes import CONVENTION_OBSERVERS, deliver, InputRoute
from ardupilot_json_bridge.sources.bagfile import (
    bag_span, bag_topics, BagError, BagMessage, CLOCK_TOPIC, read_messages)

# Playback speeds: 0 plays as fast as SITL asks, R > 0 at R times the recording's pace.
RATE_LIMITS = Limits(0.0, 1000.0)
# Seconds of wall time between progress lines.
PROGRESS_PERIOD = 10.0
# Wall seconds a lock-step replay waits at the end for SITL to take its last samples.
END_WAIT = 5.0
# How far (log time) other topics run ahead of a held primary sample in lock-step.
LOOKAHEAD_NS = 100_000_000


def resolve_topic(namespace: str, topic: str) -> str:
    """Return the name a topic has under a namespace, as ROS resolves it: absolute stays."""
    if topic.startswith('/'):
        return topic
    parts = [p for p in (namespace.strip('/'), topic.strip('/')) if p]
    return '/' + '/'.join(parts)


@dataclass(frozen=True)
class WantedTopic:
    """A topic read from a bag: its absolute name, the type it is read as, what it feeds."""

    topic: str
    msgtype: str
    name: str
    mandatory: bool = False
    # Types older recordings carry on the topic, which the reader takes too.
    older: Tuple[str, ...] = ()


def check_bag_topics(bag: str, wanted: Sequence[WantedTopic]) -> Dict[str, str]:
    """
    Refuse a bag without a mandatory topic, or with a wanted topic of another type.

    The one validation of a bag's topics, for replay and check alike; returns the bag's topics
    (name -> type) for the caller to tell which optional ones it lacks.
    """
    available = bag_topics(bag)
    listing = ', '.join(f'{t} ({m})' for t, m in sorted(available.items())) or 'none'
    missing = [f'{entry.topic} ({entry.msgtype}) for the {entry.name} input' for entry in wanted
               if entry.mandatory and entry.topic not in available]
    if missing:
        raise BagError(f'{bag} has no {" and no ".join(missing)}; its topics: {listing}. Set '
                       '--namespace or the topic parameters in --config.')
    for entry in wanted:
        msgtype = available.get(entry.topic)
        if msgtype is not None and msgtype != entry.msgtype and msgtype not in entry.older:
            raise BagError(f'{entry.topic} in {bag} is {msgtype}, but the {entry.name} input '
                           f'reads {entry.msgtype}')
    return available


@dataclass(frozen=True)
class ReplaySettings:
    """Which bag, under which namespace, how fast, and whether to start over at the end."""

    bag: str
    namespace: str = ''
    rate: float = 1.0
    loop: bool = False


class BagReplay:
    """Feeds a SensorState from a bag in a thread of its own."""

    def __init__(self, settings: ReplaySettings, routes: List[InputRoute], state: SensorState,
                 logger: Optional[logging.Logger] = None,
                 checker: Optional[ConventionChecker] = None) -> None:
        check_number('--rate', settings.rate, RATE_LIMITS)
        self.settings = settings
        self.state = state
        # Sees the IMU and odometry as recorded (the live convention checks), if given.
        self.checker = checker
        self.logger = logger or logging.getLogger('ardupilot_json_bridge.replay')
        self.warnings = RateLimitedLog(self.logger)
        self.routes: Dict[str, InputRoute] = {
            resolve_topic(settings.namespace, r.topic): r for r in routes}
        available = self._check_topics()
        # The bag's /clock, when it has one, for the live clock check.
        self._clock_topic = (CLOCK_TOPIC if checker is not None and CLOCK_TOPIC in available
                             else None)
        self._clock: Optional[float] = None
        self._primary = resolve_topic(settings.namespace,
                                      next(r.topic for r in routes if r.name == state.primary))
        span = bag_span(settings.bag)
        if not span.count:
            raise BagError(f'{settings.bag} holds no messages')
        self.start_ns, self.end_ns, self.count = span.start_ns, span.end_ns, span.count
        self.span = (span.end_ns - span.start_ns) * 1e-9
        self.finished = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.loops = 0
        self.delivered = 0
        # Why the replay stopped before the bag's end (a bag damaged midway), if it did.
        self.error: Optional[str] = None
        self.primary_step = 0.0
        self._log_to_stamp = 0.0
        self._wall_start = 0.0
        # Log time (ns) of the first message read in this pass: the pace's origin.
        self._log_start: Optional[int] = None
        self._next_progress = 0.0
        self._first_primary: Optional[float] = None
        self._previous_primary: Optional[float] = None

    def _check_topics(self) -> Dict[str, str]:
        """Refuse a bag without the mandatory topics or with other types; return its topics."""
        wanted = [WantedTopic(topic, r.msgtype, r.name, r.mandatory)
                  for topic, r in self.routes.items()]
        if self.checker is not None:
            wanted.append(WantedTopic(CLOCK_TOPIC, CLOCK_TYPE, 'clock'))
        available = check_bag_topics(self.settings.bag, wanted)
        for topic, route in self.routes.items():
            if topic not in available:
                self.logger.warning(f'{self.settings.bag} has no {topic}: the {route.name} '
                                    'input stays empty')
        return available

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name='bag-replay')
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.state.close()
        if self._thread is not None:
            self._thread.join(2.0)

    def _run(self) -> None:
        try:
            self._play()
        except BagError as error:
            # A bag damaged midway: one line, and the replay ends as at the bag's end.
            self.error = str(error)
            self.logger.error(f'replay stopped after {self.delivered} messages: {error}')
        finally:
            self.finished.set()

    def _play(self) -> None:
        """Deliver the bag (in loops if asked), pacing by log time."""
        settings = self.settings
        offset = 0.0
        self._next_progress = time.monotonic() + PROGRESS_PERIOD
        while not self._stop.is_set():
            self._wall_start = time.monotonic()
            self._log_start = None
            self._first_primary, self._previous_primary, self._clock = None, None, None
            held: Deque[BagMessage] = collections.deque()
            topics = [*self.routes, *([self._clock_topic] if self._clock_topic else [])]
            for message in read_messages(settings.bag, topics):
                if settings.rate > 0.0:
                    if not self._deliver(message, offset):
                        return
                    continue
                # Lock-step: a primary sample waits until SITL took the one before, while the
                # other topics run up to LOOKAHEAD ahead of it, so odometry logged after the
                # IMU sample it belongs to is there when the sample is served. The clock keeps
                # its place beside the primary samples.
                if message.topic in (self._primary, self._clock_topic):
                    held.append(message)
                elif not self._deliver(message, offset):
                    return
                while held and message.log_time_ns - held[0].log_time_ns >= LOOKAHEAD_NS:
                    if not self._release(held.popleft(), offset):
                        return
            while held:
                if not self._release(held.popleft(), offset):
                    return
            self.loops += 1
            if not settings.loop:
                if settings.rate == 0.0:
                    self.state.wait_until_served(END_WAIT)
                return
            if self._first_primary is None:
                self.logger.error(f'{settings.bag} has no {self._primary} message to loop '
                                  'over: the replay stops')
                return
            # The next pass's first sample comes one step after this pass's last.
            offset += self._previous_primary - self._first_primary + (self.primary_step or 1e-3)
            if self.checker is not None:
                self.checker.clear()  # the recording starts over: its stamps go back

    def _deliver(self, message: BagMessage, offset: float) -> bool:
        """
        Deliver one message at its time (rate > 0); False when asked to stop.

        Topics without headers are stamped with their log time moved into the header-stamp
        domain (a bag recorded without --use-sim-time logs wall time, its headers sim time).
        """
        rate = self.settings.rate
        now = time.monotonic()
        if self._log_start is None:
            self._log_start = message.log_time_ns
        if rate > 0.0:
            due = self._wall_start + (message.log_time_ns - self._log_start) * 1e-9 / rate
            if due > now and self._stop.wait(due - now):
                return False
        elif self._stop.is_set():
            return False
        if now >= self._next_progress:
            self._next_progress = now + PROGRESS_PERIOD
            self._progress(message.log_time_ns)
        if message.topic == self._clock_topic:
            self._clock = time_seconds(message.message.clock)
            return True
        log_time = message.log_time_ns * 1e-9
        if message.topic == self._primary:
            stamp = stamp_seconds(message.message.header)
            self._log_to_stamp = stamp - log_time
            if self._previous_primary is not None and stamp > self._previous_primary:
                self.primary_step = stamp - self._previous_primary
            if self._first_primary is None:
                self._first_primary = stamp
            self._previous_primary = stamp
        route = self.routes[message.topic]
        deliver(route, message.message, log_time + self._log_to_stamp, self.state,
                self.warnings, offset)
        observe = CONVENTION_OBSERVERS.get(route.msgtype)
        if self.checker is not None and observe is not None:
            stamp = stamp_seconds(message.message.header)
            observe(self.checker, message.message, stamp)
            if self._clock is not None and message.topic == self._primary:
                self.checker.add_clock(stamp, self._clock)
        self.delivered += 1
        return True

    def _release(self, message: BagMessage, offset: float) -> bool:
        """Lock-step: deliver a held message, a primary sample once SITL took the last one."""
        if message.topic == self._primary and not self._wait_until_served():
            return False
        return self._deliver(message, offset)

    def _wait_until_served(self) -> bool:
        """Lock-step: hold the next primary sample until SITL took the last; False on stop."""
        while not self.state.wait_until_served(0.5):
            if self._stop.is_set() or self.state.closed:
                return False
        return not self._stop.is_set()

    def _progress(self, log_time_ns: int) -> None:
        position = (log_time_ns - self.start_ns) * 1e-9
        self.logger.info(f'replay: {position:.1f} of {self.span:.1f} s'
                         f'{f" (loop {self.loops + 1})" if self.settings.loop else ""}, '
                         f'{self.delivered} messages delivered')
