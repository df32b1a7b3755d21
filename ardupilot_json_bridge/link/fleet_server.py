"""
One thread serving every SITL of a fleet whose world steps when all their frames are in.

A thread a vehicle, each waiting on the world, spent its CPU in thread hand-overs: 2 and 4
vehicles delivered about half one vehicle's frames a second (docs/performance.md); here one
thread waits on every vehicle's socket at once. A vehicle's frame is handled by its SitlLink as
it arrives; the source applies its PWM and answers HELD; when the world has stepped, every held
frame is answered from its vehicle's instant, and only then does each vehicle's bookkeeping
(checks, recording) run. A link whose frame is held is not read meanwhile (its SITL waits for
the reply and sends nothing new; a resend waits in the socket, as it would for a link thread
held by the world). A frame the world fails to step is left unanswered, to be stepped again
when its SITL resends it. Nothing in this thread waits for anything but the sockets: idle, it
sleeps in poll() with no timeout.
"""

import logging
import math
import select
import socket
import threading
from typing import Callable, Dict, List, Optional, Protocol, Sequence, Set

from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.state import Instant
from ardupilot_json_bridge.link.sitl_link import FrameServer, serve_compiled, SitlLink

# A vehicle's instant once the world stepped its held frame (MujocoLockStep.held_instant).
Resume = Callable[[], Optional[Instant]]
# poll() events of a socket that can no longer be read (closed, or in error).
GONE = select.POLLNVAL | select.POLLERR | select.POLLHUP


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
        self.warnings = RateLimitedLog(self.logger)
        for link in self.links:
            link.may_wait = False  # a wait for one vehicle's state would stall them all
        self._fds = [link.udp_socket.fileno() for link in self.links]
        self._index: Dict[int, int] = {fd: index for index, fd in enumerate(self._fds)}
        self._gone: Set[int] = set()
        self._waker, self._wake_end = socket.socketpair()
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # The fleet's plain frames served in C (sources/compiled_frames.py), if any.
        self.compiled: Optional[FrameServer] = None

    @property
    def waker(self) -> int:
        """Return the socket stop() writes to, which wakes any wait for the SITLs."""
        return self._waker.fileno()

    def start(self) -> None:
        """Serve in a daemon thread until stop()."""
        for link in self.links:
            link.announce()
        self._thread = threading.Thread(target=self._run, daemon=True, name='sitl-fleet')
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop serving (the links stay open: their owner stops them); again: nothing."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake_end.send(b'\0')
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)
        if self.compiled is not None:
            self.compiled.close()
        self._waker.close()
        self._wake_end.close()

    def _run(self) -> None:
        poller, registered = select.poll(), set()
        poller.register(self._waker, select.POLLIN)
        while not self._stopping.is_set():
            compiled = self.compiled
            if compiled is not None and compiled.ready():
                self._serve_compiled(compiled)
                continue
            try:
                self._watch(poller, registered)
                wait = self.world.wait_time()
                events = poller.poll(None if wait is None else math.ceil(wait * 1000))
                for fd, event in events:
                    index = self._index.get(fd)
                    if index is None:
                        continue
                    if event & GONE:
                        self._lose(poller, registered, index)
                    else:
                        self.links[index].receive_one()
                self._step()
            except Exception as error:
                if self._stopping.is_set():
                    return
                self.warnings.error('loop', f'the fleet carries on after an unexpected '
                                            f'{error!r}')
                self.logger.debug('traceback of the error above', exc_info=True)

    def _serve_compiled(self, compiled: FrameServer) -> None:
        """Serve plain frames in C until a datagram needs a link; then step as ever."""
        if not serve_compiled(compiled, self.logger):
            self.compiled = None
        self._step()

    def _watch(self, poller: 'select.poll', registered: set) -> None:
        """Wait on the sockets of the links not held (a held link's SITL waits for its reply)."""
        for index, link in enumerate(self.links):
            if index in self._gone:
                continue
            if link.held and index in registered:
                poller.unregister(self._fds[index])
                registered.discard(index)
            elif not link.held and index not in registered:
                poller.register(self._fds[index], select.POLLIN)
                registered.add(index)

    def _lose(self, poller: 'select.poll', registered: set, index: int) -> None:
        """Stop waiting on a socket that cannot be read any more (closed under the server)."""
        self._gone.add(index)
        if index in registered:
            poller.unregister(self._fds[index])
            registered.discard(index)
        link = self.links[index]
        self.logger.error(f'SITL instance {link.settings.instance}: its socket cannot be read '
                          'any more (closed?): the fleet serves the others')

    def _step(self) -> None:
        """Step the world if every frame is in; answer each frame it stepped, then bookkeep."""
        try:
            stepped = self.world.advance()
        except Exception as error:
            failed = [link for link in self.links if link.held]
            self.warnings.error('advance', f"stepping the fleet's world failed: {error!r}; "
                                           f'{len(failed)} frame(s) are stepped again when '
                                           'their SITLs resend them')
            for link in failed:
                link.fail_held('the world failed to step')
            return
        for index in stepped:
            self._answer(index)
        for index in stepped:
            self.links[index].bookkeep_released()

    def _answer(self, index: int) -> None:
        """Answer vehicle index's held frame from where the world's step left it."""
        link = self.links[index]
        try:
            instant = self.resume[index]()
        except Exception as error:
            link.fail_held(f'reading vehicle {index} after the step failed: {error!r}')
            return
        link.release(instant)
