"""
Lock-step MuJoCo frames served in C, the links' bookkeeping in batches on a thread of its own.

While every session is plain (its last frame answered, nothing held, stepped ahead or failed),
the serving thread (a lone vehicle's link thread, or a fleet's server) hands the sockets to the
compiled frame loop (compiled/_frame.c FrameLoop). It reads each vehicle's plain next frame
(its locked SITL's, the count after the last, the channel count and frame rate of the frame
before); once every vehicle's is in, it does what SitlLink, MujocoLockStep and FleetWorld do,
with the same compiled rules: PWM to commands, the world stepped once for all, sensors, ROS to
ArduPilot conventions, the replies; it sends them and reads on without the interpreter. Any
other datagram (a first frame, a restart, a resend, a stranger, a bad packet, a new frame rate)
and a world held longer than hold_timeout go back to the links, with the datagrams read with
them, which handle them as ever.

The frames served go into the bookkeeping (the session, the statistics, the state, the live
checks, the recording) in batches of up to BATCH, on a thread of their own, while the loop serves
on: no reply waits for the interpreter. A batch is bookkept a vehicle at a time (VehicleBatch),
not a frame at a time. Before the links handle a datagram handed back, every frame served is
bookkept.
"""

import functools
import logging
import math
import os
import threading
import time
from typing import NamedTuple, Optional, Sequence, Tuple

from ardupilot_json_bridge.compiled import _frame
from ardupilot_json_bridge.core.protocol import ReplyError, ServoPacket
from ardupilot_json_bridge.link.fleet_server import FleetServer
from ardupilot_json_bridge.link.session import frame_period
from ardupilot_json_bridge.link.sitl_link import SitlLink
from ardupilot_json_bridge.sources.mujoco_fleet import FleetWorld
from ardupilot_json_bridge.sources.mujoco_source import frame_instant, MujocoLockStep
from ardupilot_json_bridge.sources.mujoco_vehicle import (
    _diverged, frame_steps, reading_state, VehicleState)

Reading = Tuple[float, ...]

# The most frames a batch holds; one goes sooner once its first frame is 2 ms old (BATCH_AGE in
# compiled/_frame.c): a few frames at real time, a full batch at 20 x.
BATCH = 32
# What FrameLoop.serve() returns first (compiled/_frame.c).
HANDED_BACK, RECEIVE_FAILED, UNANSWERED, WAITED = range(4)


class VehicleBatch(NamedTuple):
    """
    One vehicle's frames of a batch the loop served (FrameLoop.take, compiled/_frame.c).

    The frames answered are counted, their newest given whole; a frame not answered (its
    physics time did not advance, or no reply could be made) is given alone, after them. checks
    holds every frame where asked for: the live checks' arguments.
    """

    index: int
    frames: int
    last_count: int
    last_received: float
    last_pwm: Tuple[int, ...]
    last_commands: Tuple[float, ...]
    answered: int
    answered_count: int
    answered_reading: Optional[Reading]
    reply: Optional[bytes]
    timestamp: float
    previous_timestamp: float
    replied_at: float
    latencies: Tuple[float, ...]
    send_errors: Tuple[int, ...]
    unanswered: Tuple[Tuple[int, Reading, float], ...]
    checks: Optional[Tuple[tuple, ...]]


# A frame as the recording takes it: (vehicle, reading, pwm, commands), in the order served.
Record = Tuple[int, Reading, Tuple[int, ...], Tuple[float, ...]]


def loop_blocker(link: SitlLink, source: MujocoLockStep) -> Optional[str]:
    """Return why the frame loop cannot serve link's source at all, or None where it can."""
    if source.reply_first:
        return 'reply-first steps each frame after its reply'
    if source.vehicle.aero is not None:
        return f'{source.vehicle.path} has a force model, stepped in Python'
    if source.viewing:
        return 'the viewer is synced in Python'
    if link.state.grid:
        return 'the state paces on the frame grid'
    return None


def compile_frames(links: Sequence[SitlLink], sources: Sequence[MujocoLockStep],
                   server: Optional[FleetServer] = None) -> Optional[str]:
    """
    Have the compiled frame loop serve the links' plain frames; return why not, if it cannot.

    A lone vehicle's link serves it from its thread, a fleet's server from its own. The loop
    answers a frame on its arrival in microseconds: nothing is stepped ahead.
    """
    for link, source in zip(links, sources):
        blocker = loop_blocker(link, source)
        if blocker is not None:
            return blocker
    try:
        if server is None:
            links[0].compiled = CompiledFrames(links, sources)
        else:
            server.compiled = CompiledFrames(links, sources, server.world, server.waker)
    except OSError as error:  # the system refused the clock of the loop's timed wait
        return f'the compiled frame loop could not start ({error})'
    for link in links:
        link.step_ahead = None
    return None


class CompiledFrames:
    """Serves lock-step MuJoCo vehicles' plain frames in C (a lone one, or a fleet's world)."""

    def __init__(self, links: Sequence[SitlLink], sources: Sequence[MujocoLockStep],
                 world: Optional[FleetWorld] = None, waker: int = -1,
                 batch: int = BATCH) -> None:
        """Serve each link's frames from its source (on_frame of the link), where plain."""
        self.links = tuple(links)
        self.sources = tuple(sources)
        self.vehicles = tuple(source.vehicle for source in sources)
        self.world = world
        settings = self.links[0].settings
        hold = world.hold_timeout if world is not None else math.inf
        self.loop = _frame.FrameLoop(
            tuple(link.udp_socket.fileno() for link in self.links),
            tuple(vehicle.kernel for vehicle in self.vehicles), waker,
            hold if math.isfinite(hold) else 1e9, functools.partial(_diverged, self.vehicles),
            batch, settings.no_time_sync, settings.no_lockstep)
        if world is not None:
            world.steps_elsewhere = self.world_steps
        self._steps = 1
        self._rates: Tuple[int, ...] = ()
        # A socket the loop cannot poll (closed, or a fleet's in error): the Python server serves.
        self.failed = False
        self.served = 0  # frames bookkept, every vehicle's
        self.batches = 0  # batches bookkept
        self._bookkept = threading.Condition()
        name = f'bookkeeping-{settings.instance}'
        self._thread = threading.Thread(target=self._bookkeep_batches, daemon=True, name=name)
        self._thread.start()

    def close(self) -> None:
        """Stop the bookkeeping thread (once the serving thread has stopped serving)."""
        self.loop.close()
        self._thread.join(2.0)

    def world_steps(self) -> int:
        """Return how many times the loop stepped the world (counted as it steps)."""
        return self.loop.served()[1]

    def settle(self, timeout: float = 2.0) -> bool:
        """
        Wait until every frame served so far is bookkept; return whether it is.

        The counters trail the replies by a few milliseconds (a batch is bookkept once full
        or 2 ms old; hurried here): for tools and tests reading them between frames.
        """
        target, _ = self.loop.served()
        self.loop.hurry()
        with self._bookkept:
            return self._bookkept.wait_for(lambda: self.served >= target, timeout)

    def ready(self) -> bool:
        """Whether every session is plain: the loop may serve their next frames."""
        for link, source in zip(self.links, self.sources):
            session = link.session
            if not (session.last_frame is not None
                    and session.replied_frame == session.last_frame
                    and session.origin is not None and session.last_stamp is not None
                    and link.peer is not None and link.plain and source.plain
                    and link.stats.channel_count in (16, 32)):
                return False
        world = self.world
        return not self.failed and (world is None or world.all_holding)

    def serve(self) -> None:
        """Serve plain frames until a datagram needs a link; all of them bookkept on return."""
        links, first = self.links, self.vehicles[0]
        rates = self._rates = tuple(link.stats.frame_rate_hint for link in links)
        # A fleet's world steps by the shortest period its frames ask (FleetWorld's rule).
        steps, step = frame_steps(min(frame_period(rate) for rate in rates), first.nominal_step)
        first.model.opt.timestep = step
        self._steps = steps
        split = first.split_step
        sessions = tuple((*link.peer, link.session.last_frame, link.stats.channel_count, rate,
                          link.session.origin, link.session.last_stamp)
                         for link, rate in zip(links, rates))
        released = self.world.released if self.world is not None else time.monotonic()
        self.loop.resume(tuple(source.mapper.pwm_map for source in self.sources), sessions,
                         steps, step, split, released)
        outcome, handed, error = self.loop.serve()
        for index, data, sender, received in handed:
            links[index].handle_received(data, sender, received)
        if outcome == RECEIVE_FAILED:
            index, number = error
            if not number:
                self.failed = True  # the Python server's poll judges the socket from now on
                return
            for link in (links if index < 0 else (links[index],)):
                link.receive_failed(OSError(number, os.strerror(number)))

    def _bookkeep_batches(self) -> None:
        """Take each batch the loop served into the bookkeeping, until closed."""
        loop, link = self.loop, self.links[0]
        while True:
            try:
                batch = loop.take(any(s.checker is not None for s in self.sources),
                                  any(s.recorder is not None for s in self.sources))
            except Exception as error:
                # The loop must not wait for a bookkeeping that is gone: it stops being ready.
                self.failed = True
                loop.close()
                link.logger.error(f'{link._prefix}taking frames served in C failed ({error!r}): '
                                  'every frame is served in Python from the next one')
                return
            if batch is None:
                return
            self.batches += 1
            groups, records = batch
            try:
                self._record(records)
                self._bookkeep([VehicleBatch(*fields) for fields in groups])
            except Exception as error:
                link.warnings.error('bookkeeping', f'{link._prefix}the bookkeeping of frames '
                                                   f'served in C failed: {error!r}')
                link.logger.debug('traceback of the error above', exc_info=True)
            try:
                loop.done()
            except OSError as error:
                self.failed = True
                loop.close()
                link.logger.error(f'{link._prefix}handing a batch back to the compiled loop '
                                  f'failed ({error!r}): every frame is served in Python from '
                                  'the next one')
                return
            finally:
                with self._bookkept:
                    self._bookkept.notify_all()

    def _record(self, records: Optional[Sequence[Record]]) -> None:
        """
        Hand every frame to its vehicle's recording, in the order served.

        A fleet shares one recording, which writes a world step's /clock once, from its first
        vehicle's frame: the frames go in world step by world step.
        """
        for index, reading, pwm, commands in records or ():
            recorder = self.sources[index].recorder
            if recorder is not None:
                recorder.add(reading_state(reading), pwm, commands, index)

    def _bookkeep(self, batch: Sequence[VehicleBatch]) -> None:
        """
        Take a batch of frames served into the links' and the sources' bookkeeping.

        Per vehicle, not per frame: every frame goes to the live checks, the newest answered to
        the state (metered as all of them), the session and the statistics.
        """
        for served in batch:
            index = served.index
            link, source, vehicle = self.links[index], self.sources[index], self.vehicles[index]
            if served.checks is not None and source.checker is not None:
                source.checker.add_frames(served.checks)
            stats = link.stats
            stats.received += served.frames
            stats.new_frames += served.frames
            stats.last_packet = link.peers.heard = served.last_received
            if served.answered:
                self._answered(link, served)
            link.session.last_frame = served.last_count
            for count, reading, timestamp in served.unanswered:
                self._unanswered(link, count, reading_state(reading), timestamp)
            vehicle.steps += served.frames * self._steps
            source.frames += served.frames
            rate = self._rates[index] if index < len(self._rates) else 0
            source.stepped_in_c(ServoPacket(rate, served.last_count, served.last_pwm),
                                list(served.last_commands))
            self.served += served.frames
        answered_at = [served.replied_at for served in batch if served.answered]
        if self.world is not None and answered_at:
            self.world.answered_at(max(answered_at))

    @staticmethod
    def _answered(link: SitlLink, served: VehicleBatch) -> None:
        """Push the newest frame answered, remember its reply, count the replies sent."""
        reading = reading_state(served.answered_reading)
        sequence = link.state.push_instant(frame_instant(reading), served=True,
                                           frames=served.answered)
        session = link.session
        session.record_reply(served.answered_count, served.reply, sequence, reading.time,
                             served.timestamp, served.previous_timestamp)
        session.replied_at = served.replied_at
        link.stats.replied += len(served.latencies)
        link.stats.latency.extend(served.latencies)
        for error in served.send_errors:
            link.send_failed(OSError(error, os.strerror(error)))

    def _unanswered(self, link: SitlLink, frame_count: int, reading: VehicleState,
                    timestamp: float) -> None:
        """Push a frame the loop stepped but could not answer, and say why, as the link does."""
        packet = ServoPacket(0, frame_count, ())
        try:
            instant = frame_instant(reading)
        except ValueError as error:
            link._unanswered(packet, f'the vehicle gave no orientation: {error}', 'reply_error',
                             logging.ERROR)
            return
        link.state.push_instant(instant)
        reason = 'its physics time did not advance'
        if not math.isnan(timestamp):
            try:
                link._encode(instant, timestamp)
            except ReplyError as error:
                reason = str(error)
        link._unanswered(packet, reason, 'reply_error')
