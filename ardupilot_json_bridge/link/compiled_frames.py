"""
A lone MuJoCo vehicle's lock-step frames served in C, the link's bookkeeping in batches.

While a session is plain (its last frame answered, nothing held, stepped ahead or failed), the
link's thread hands its socket to the compiled frame loop (compiled/_frame.c FrameLoop). For
each plain next frame (the locked SITL's, the count after the last, the channel count and frame
rate of the frame before) the loop does what SitlLink and MujocoLockStep do, with the same
compiled rules: PWM to commands, physics, sensors, ROS to ArduPilot conventions, the reply; it
sends the reply and reads the next datagram without the interpreter. Any other datagram (a
first frame, a restart, a resend, a stranger, a bad packet, a new frame rate) goes back to the
link, which handles it as ever.

Every BATCH frames, and before the link handles a datagram handed back, the frames served go
into the bookkeeping each frame gets in Python: the session, the statistics, the state, the
live checks and the recording, in order. So one interpreter pass serves many frames, and the
replies never wait for it.
"""

import logging
import math
import os
import threading
from typing import Optional, Tuple, TYPE_CHECKING

from ardupilot_json_bridge.compiled import _frame
from ardupilot_json_bridge.core.protocol import ReplyError, ServoPacket
from ardupilot_json_bridge.link.session import frame_period
from ardupilot_json_bridge.sources.mujoco_source import frame_instant, MujocoLockStep
from ardupilot_json_bridge.sources.mujoco_vehicle import (
    _diverged, frame_steps, reading_state, VehicleState)

if TYPE_CHECKING:
    from ardupilot_json_bridge.link.sitl_link import SitlLink

# Frames served between two passes of the bookkeeping: at SITL's 1200 frames a second, 27 ms.
BATCH = 32
# What FrameLoop.serve() returns first (compiled/_frame.c).
HANDED_BACK, RECEIVE_FAILED, UNANSWERED = range(3)


def loop_blocker(link: 'SitlLink', source: MujocoLockStep) -> Optional[str]:
    """Return why the frame loop cannot serve link's source at all, or None where it can."""
    if source.world is not None:
        return 'a fleet steps its world in the fleet server'
    if source.reply_first:
        return 'reply-first steps each frame after its reply'
    if source.vehicle.aero is not None:
        return f'{source.vehicle.path} has a force model, stepped in Python'
    if source.viewing:
        return 'the viewer is synced in Python'
    if link.state.grid:
        return 'the state paces on the frame grid'
    return None


def compile_frames(link: 'SitlLink', source: MujocoLockStep) -> Optional[str]:
    """
    Have the compiled frame loop serve link's plain frames; return why not, where it cannot.

    The loop answers a frame on its arrival in microseconds: nothing is stepped ahead.
    """
    blocker = loop_blocker(link, source)
    if blocker is None:
        link.compiled = CompiledFrames(link, source)
        link.step_ahead = None
    return blocker


class CompiledFrames:
    """Serves a lone lock-step MuJoCo vehicle's plain frames in C, for its link's thread."""

    def __init__(self, link: 'SitlLink', source: MujocoLockStep, batch: int = BATCH) -> None:
        """Serve link's frames from source (MujocoLockStep, on_frame of link) where plain."""
        blocker = loop_blocker(link, source)
        if blocker is not None:
            raise ValueError(f'the compiled frame loop cannot serve this vehicle: {blocker}')
        self.link = link
        self.source = source
        self.vehicle = source.vehicle
        settings = link.settings
        self.loop = _frame.FrameLoop(link.udp_socket.fileno(), self.vehicle.kernel,
                                     self._diverged, batch, settings.no_time_sync,
                                     settings.no_lockstep)
        self._steps = 1
        self._rate = 0
        self.served = 0  # frames the loop served
        self._thread = threading.Thread(target=self._bookkeep_batches, daemon=True,
                                        name=f'sitl-bookkeeping-{settings.instance}')
        self._thread.start()

    def close(self) -> None:
        """Stop the bookkeeping thread (after the link's thread has stopped serving)."""
        self.loop.close()
        self._thread.join(2.0)

    def ready(self) -> bool:
        """Whether the session is plain: the loop may serve its next frames."""
        link, source, session = self.link, self.source, self.link.session
        return (session.last_frame is not None and session.replied_frame == session.last_frame
                and session.origin is not None and session.last_stamp is not None
                and link.peer is not None and link.plain and source.plain
                and link.stats.channel_count in (16, 32))

    def serve(self) -> None:
        """Serve plain frames until a datagram needs the link; all of them bookkept on return."""
        link, session, vehicle = self.link, self.link.session, self.vehicle
        host, port = link.peer
        rate = self._rate = link.stats.frame_rate_hint
        steps, step = frame_steps(frame_period(rate), vehicle.nominal_step)
        vehicle.model.opt.timestep = step
        self._steps = steps
        split = vehicle.forwarded and int(vehicle.model.opt.integrator) != vehicle.rk4
        self.loop.resume(self.source.mapper.pwm_map, host, port, session.last_frame,
                         link.stats.channel_count, rate, steps, step, split, session.origin,
                         session.last_stamp)
        outcome, detail = self.loop.serve()
        if outcome == HANDED_BACK:
            data, sender = detail
            link.handle_received(data, sender)
        elif outcome == RECEIVE_FAILED:
            link.receive_failed(OSError(detail, os.strerror(detail)))

    def _diverged(self, end: float) -> None:
        """MuJoCo reset the world in the loop's step: say so, keep the clock (Python's rule)."""
        _diverged((self.vehicle,), end)

    def _bookkeep_batches(self) -> None:
        """Take each batch the loop served into the bookkeeping, until closed."""
        loop = self.loop
        while True:
            batch = loop.take()
            if batch is None:
                return
            try:
                self._bookkeep(*batch)
            except Exception as error:
                self.link.warnings.error('bookkeeping', f'{self.link._prefix}the bookkeeping of '
                                                        f'frames served in C failed: {error!r}')
            finally:
                loop.done()

    def _bookkeep(self, counts: Tuple[int, ...], pwm: Tuple[Tuple[int, ...], ...],
                  commands: Tuple[Tuple[float, ...], ...], readings: Tuple[Tuple[float, ...], ...],
                  timestamps: Tuple[float, ...], received: Tuple[float, ...],
                  sent: Tuple[float, ...], errors: Tuple[int, ...], answered: Tuple[bool, ...],
                  reply: Optional[bytes]) -> None:
        """Take a batch of frames served into the link's and the source's bookkeeping."""
        count = len(counts)
        link, source, vehicle = self.link, self.source, self.vehicle
        stats, session, state = link.stats, link.session, link.state
        stats.received += count
        stats.new_frames += count
        stats.last_packet = received[-1]
        recorder, index = source.recorder, vehicle.index
        last = count - 1
        for k in range(count):
            reading = reading_state(readings[k])
            source._check(reading, pwm[k])
            if recorder is not None:
                recorder.add(reading, pwm[k], commands[k], index)
            if not answered[k]:
                self._unanswered(counts[k], reading, timestamps[k])
                continue
            sequence = state.push_instant(frame_instant(reading), served=True)
            session.record_reply(counts[k], reply if k == last else None, sequence,
                                 reading.time, timestamps[k])
            self._sent(received[k], sent[k], errors[k])
        session.last_frame = counts[-1]
        vehicle.steps += count * self._steps
        source.frames += count
        source.stepped_in_c(ServoPacket(self._rate, counts[-1], pwm[-1]), list(commands[-1]))
        self.served += count

    def _sent(self, received: float, sent: float, error: int) -> None:
        """Count a reply the loop sent, or say why it could not."""
        link = self.link
        link.session.replied_at = sent
        if error:
            link.warnings.warning('send', f'{link._prefix}reply to {link.peer} failed: '
                                          f'{os.strerror(error)}')
            return
        link.stats.replied += 1
        link.stats.latency.add(sent - received)

    def _unanswered(self, frame_count: int, reading: VehicleState, timestamp: float) -> None:
        """The loop stepped a frame it could not answer: push it, and say why, as the link does."""
        link = self.link
        packet = ServoPacket(self._rate, frame_count, ())
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
