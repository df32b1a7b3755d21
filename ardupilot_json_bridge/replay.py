"""Bag replay: a recorded simulation as the physics source, paced by its own stamps.

With rate R > 0 messages are delivered at their log times divided by R (wall clock); with
R = 0 each primary sample waits until the link has served the one before, so the bag plays as
fast as SITL asks for frames.
"""

from dataclasses import dataclass
import logging
import statistics
import threading
import time
from typing import Dict, List, Optional

from ardupilot_json_bridge.bagfile import bag_topics, BagError, BagMessage, read_messages
from ardupilot_json_bridge.inputs import stamp_seconds
from ardupilot_json_bridge.ratelimit import RateLimitedLog
from ardupilot_json_bridge.routes import deliver, InputRoute
from ardupilot_json_bridge.state import SensorState


def resolve_topic(namespace: str, topic: str) -> str:
    """The absolute name a relative topic has under a namespace, as ROS resolves it."""
    parts = [p for p in (namespace.strip('/'), topic.strip('/')) if p]
    return '/' + '/'.join(parts)


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
                 logger: Optional[logging.Logger] = None) -> None:
        if settings.rate < 0.0:
            raise BagError(f'--rate must be 0 (as fast as SITL asks) or positive, not '
                           f'{settings.rate}')
        self.settings = settings
        self.state = state
        self.logger = logger or logging.getLogger('ardupilot_json_bridge.replay')
        self.warnings = RateLimitedLog(self.logger)
        self.routes: Dict[str, InputRoute] = {
            resolve_topic(settings.namespace, r.topic): r for r in routes}
        self._check_topics()
        self.messages: List[BagMessage] = read_messages(settings.bag, self.routes)
        primary = resolve_topic(settings.namespace,
                                next(r.topic for r in routes if r.name == state.primary))
        self._primary = primary
        stamps = [m.log_time_ns for m in self.messages if m.topic == primary]
        if not stamps:
            raise BagError(f'{settings.bag}: no messages on {primary}')
        steps = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
        step = statistics.median(steps) if steps else 1_000_000
        self.start_ns = self.messages[0].log_time_ns
        self.span = (self.messages[-1].log_time_ns - self.start_ns + step) * 1e-9
        self.finished = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.loops = 0

    def _check_topics(self) -> None:
        available = bag_topics(self.settings.bag)
        listing = ', '.join(f'{t} ({m})' for t, m in sorted(available.items())) or 'none'
        for topic, route in self.routes.items():
            msgtype = available.get(topic)
            if msgtype is None:
                if route.mandatory:
                    raise BagError(f'{self.settings.bag} has no {topic} ({route.msgtype}) for '
                                   f'the {route.name} input; its topics: {listing}. Set '
                                   '--namespace or the topic parameters in --config.')
                self.logger.warning(f'{self.settings.bag} has no {topic}: the {route.name} '
                                    'input stays empty')
            elif msgtype != route.msgtype:
                raise BagError(f'{topic} in {self.settings.bag} is {msgtype}, but the '
                               f'{route.name} input reads {route.msgtype}')

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
        finally:
            self.finished.set()

    def _play(self) -> None:
        """Deliver the bag (in loops if asked), pacing by log time.

        Topics without headers are stamped with their log time moved into the header-stamp
        domain (a bag recorded without --use-sim-time logs wall time, its headers sim time).
        """
        settings, state = self.settings, self.state
        offset = 0.0
        log_to_stamp = 0.0
        while not self._stop.is_set():
            wall_start = time.monotonic()
            for message in self.messages:
                if settings.rate > 0.0:
                    due = wall_start + (message.log_time_ns - self.start_ns) * 1e-9 / settings.rate
                    delay = due - time.monotonic()
                    if delay > 0.0 and self._stop.wait(delay):
                        return
                elif self._stop.is_set():
                    return
                route = self.routes[message.topic]
                log_time = message.log_time_ns * 1e-9
                if message.topic == self._primary:
                    log_to_stamp = stamp_seconds(message.message.header) - log_time
                delivered = deliver(route, message.message, log_time + log_to_stamp, state,
                                    self.warnings, offset)
                if delivered and settings.rate == 0.0 and message.topic == self._primary:
                    state.wait_until_served()
            self.loops += 1
            if not settings.loop:
                return
            offset += self.span
