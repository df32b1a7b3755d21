"""
One thread serving every SITL of a fleet whose world steps when all their frames are in.

A thread a vehicle, each waiting on the world, cost about twice a lone vehicle's CPU a frame
in thread hand-overs (docs/performance.md); here one thread waits on every vehicle's socket at
once. A vehicle's frame is handled by its SitlLink as it arrives; the source applies its PWM
and answers HELD; when the world has stepped, each held frame is answered from its vehicle's
instant. A link whose frame is held is not read meanwhile (its SITL waits for the reply and
sends nothing new; a resend waits in the socket, as it would for a link thread held by the
world). Idle, the thread sleeps in poll() with no timeout.
"""

import logging
import math
import select
import socket
import threading
from typing import Callable, List, Optional, Protocol, Sequence

from ardupilot_json_bridge.core.state import Instant
from ardupilot_json_bridge.link.sitl_link import SitlLink

# A vehicle's instant once the world stepped its held frame (MujocoLockStep.held_instant).
Resume = Callable[[], Optional[Instant]]


class SharedWorld(Protocol):
    """The world a fleet's frames step together (sources.mujoco_fleet.FleetWorld)."""

    def wait_time(self) -> Optional[float]:
        """Seconds to wait for frames before a silent SITL is let go; None: no limit."""

    def advance(self) -> List[int]:
        """Step if every connected SITL's frame is in; return the vehicles answered."""


class FleetServer:
    """Serves links[k] (vehicle k) in one thread; resume[k] gives vehicle k's stepped instant."""

    def __init__(self, links: Sequence[SitlLink], world: SharedWorld,
                 resume: Sequence[Resume], logger: Optional[logging.Logger] = None) -> None:
        if len(links) != len(resume):
            raise ValueError('one resume callback a link')
        self.links = tuple(links)
        self.world = world
        self.resume = tuple(resume)
        self.logger = logger or logging.getLogger('ardupilot_json_bridge.fleet')
        self._index = {link.socket.fileno(): index for index, link in enumerate(self.links)}
        self._waker, self._wake_end = socket.socketpair()
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Serve in a daemon thread until stop()."""
        for link in self.links:
            link.announce()
        self._thread = threading.Thread(target=self._run, daemon=True, name='sitl-fleet')
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop serving (the links stay open: their owner stops them)."""
        self._stopping.set()
        self._wake_end.send(b'\0')
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)
        self._waker.close()
        self._wake_end.close()

    def _run(self) -> None:
        poller, registered = select.poll(), set()
        poller.register(self._waker, select.POLLIN)
        while not self._stopping.is_set():
            for index, link in enumerate(self.links):
                fd = link.socket.fileno()
                if link.held and index in registered:
                    poller.unregister(fd)
                    registered.discard(index)
                elif not link.held and index not in registered:
                    poller.register(fd, select.POLLIN)
                    registered.add(index)
            wait = self.world.wait_time()
            try:
                events = poller.poll(None if wait is None else math.ceil(wait * 1000))
            except OSError as error:
                self.logger.error(f'the fleet cannot wait on its sockets: {error}')
                return
            for fd, _ in events:
                index = self._index.get(fd)
                if index is not None:
                    self.links[index].receive_one()
            for index in self._advance():
                self._answer(index)

    def _advance(self) -> List[int]:
        """Step the world if it is time; a failure is said and the held frames answered."""
        try:
            return self.world.advance()
        except Exception as error:
            self.logger.error(f"stepping the fleet's world failed: {error!r}; its frames are "
                              'answered from the vehicles as they are')
            return [index for index, link in enumerate(self.links) if link.held]

    def _answer(self, index: int) -> None:
        """Answer vehicle index's held frame from where the world's step left it."""
        link = self.links[index]
        try:
            instant = self.resume[index]()
        except Exception as error:
            link.warnings.error('on_frame', f'SITL instance {link.settings.instance}: reading '
                                            f'vehicle {index} after the step failed: {error!r}')
            instant = None
        link.release(instant)
