"""
The JSON SITL link: a UDP socket, one SITL peer, one reply per servo packet.

Runs in its own thread and blocks on its socket (and, per frame, on the state's condition
variable), so an idle link costs no CPU and simulated time stopping cannot stall it; or a
FleetServer reads many links' sockets in one thread (receive_one, release).

The link is the frame's path from datagram to reply; each rule on the way is a module:
udp_port (the socket), peer_lock (which SITL is answered), session (what a frame_count
means, the session's clock), frame_answer (what on_frame returns), state_pacing (which
instant of the state answers, when the engine gives none).
"""

import logging
import socket
import threading
import time
from typing import Callable, Optional, Protocol, Tuple

from ardupilot_json_bridge.core.protocol import (
    decode_servo_packet, encode_reply, next_frame_datagram, ReplyError, ServoPacket,
    ServoPacketError)
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.reply import build_reply
from ardupilot_json_bridge.core.settings import LinkSettings
from ardupilot_json_bridge.core.state import Instant, SensorState, Unavailable
from ardupilot_json_bridge.core.stats import LinkStats
from ardupilot_json_bridge.link.frame_answer import (
    FrameAnswer, FrameCallback, FrameInHand, HELD, is_frame_answer, ReplyAhead)
from ardupilot_json_bridge.link.peer_lock import PeerLock, PeerVerdict
from ardupilot_json_bridge.link.session import FrameKind, SitlSession
from ardupilot_json_bridge.link.state_pacing import StatePacing, WaitCallback
from ardupilot_json_bridge.link.udp_port import Address, bind_udp, MAX_DATAGRAM, wake

RestartCallback = Callable[[], None]


class FrameServer(Protocol):
    """Serves plain frames in the serving thread (sources/compiled_frames.CompiledFrames)."""

    def ready(self) -> bool:
        """Whether the sessions are plain: serve() may serve their next frames."""

    def serve(self) -> None:
        """Serve until a datagram needs the link, which is handed it; bookkeep every frame."""

    def close(self) -> None:
        """Stop, once the serving thread stopped serving."""


def serve_compiled(compiled: FrameServer, logger: logging.Logger, prefix: str = '') -> bool:
    """Serve with compiled; where it fails, close it and say so, and return False."""
    try:
        compiled.serve()
        return True
    except Exception as error:
        compiled.close()
        logger.error(f'{prefix}the compiled frame loop failed ({error!r}): every frame is '
                     'served in Python from now on')
        logger.debug('traceback of the error above', exc_info=True)
        return False


# A lock-step engine stepping the frame after packet's on a guess: the Instant it stepped to.
StepAheadCallback = Callable[[ServoPacket], Optional[Instant]]


class SitlLink:
    """Serves one SITL instance from a SensorState; calls on_frame for every new frame."""

    def __init__(self, settings: LinkSettings, state: SensorState,
                 on_frame: Optional[FrameCallback] = None,
                 logger: Optional[logging.Logger] = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_restart: Optional[RestartCallback] = None,
                 sock: Optional[socket.socket] = None,
                 after_reply: Optional[RestartCallback] = None,
                 step_ahead: Optional[StepAheadCallback] = None,
                 on_wait: Optional[WaitCallback] = None) -> None:
        """
        Bind the settings' port, or serve on sock, bound already by the caller.

        on_frame(packet) takes each new frame's PWM and tells how it is answered
        (link/frame_answer.py): an Instant, HELD or None.

        on_wait, on the grid, is told each instant a frame is about to wait for: a simulator
        stepped through ROS is stepped to it (lock-step through ROS, ros/sim_control.py).

        after_reply runs after each new frame's reply is sent: a lock-step source's
        bookkeeping (checks, recording) while SITL computes its next frame. step_ahead runs
        after that, for a frame answered from the Instant on_frame gave: a lock-step engine
        may step the next frame as if it brings the same PWM and frame rate, and return its
        Instant, which on_frame must then return for such a frame (and for no other). The
        reply is encoded then; when the next datagram is that frame, byte for byte, it goes
        out on arrival, and the frame is handled after it.
        """
        self.settings = settings
        self.on_frame = on_frame
        # The frame whose on_frame raised: SITL resends it unanswered, and it is tried again.
        self._failed_frame: Optional[int] = None
        self.on_restart = on_restart
        self.after_reply = after_reply
        self.step_ahead = step_ahead
        self._ahead: Optional[ReplyAhead] = None
        self.logger = logger or logging.getLogger('ardupilot_json_bridge.link')
        self.warnings = RateLimitedLog(self.logger)
        self.stats = LinkStats()
        self.session = SitlSession()
        self._clock = clock
        self._prefix = f'SITL instance {settings.instance}: '
        self.peers = PeerLock(self.logger, self.warnings, self._prefix)
        self.pacing = StatePacing(state, self.session, self.stats, self.warnings, self._prefix,
                                  clock, on_wait)
        self._sock = sock or bind_udp(settings.bind_address, settings.listen_port,
                                      settings.instance)
        self.address: Address = self._sock.getsockname()[:2]
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._held: Optional[FrameInHand] = None
        # The frame release() answered, whose bookkeeping is still to run, and whether it was
        # answered from the engine's instant (what stepping ahead needs).
        self._released: Optional[Tuple[FrameInHand, bool]] = None
        # False where one thread serves many links (a fleet): no frame may wait for the state.
        self.may_wait = True
        # A lone MuJoCo vehicle's plain frames served in C (sources/compiled_frames.py), if any.
        self.compiled: Optional[FrameServer] = None

    def announce(self) -> None:
        """Say where the link listens (once, when its serving starts)."""
        self.logger.info(f'{self._prefix}listening on UDP {self.address[0]}:{self.address[1]} '
                         f'for ArduPilot SITL (--model JSON:<this host>)')

    def start(self) -> None:
        """Serve in a daemon thread until stop()."""
        self.announce()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f'sitl-link-{self.settings.instance}')
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop serving, close the state (waking its waiters) and release the port."""
        self._stopping.set()
        self.state.close()
        if self._thread is not None and self._thread.is_alive():
            error = wake(self.address)
            if error is not None:
                self.logger.warning(f'{self._prefix}could not wake the link thread: {error}')
            self._thread.join(timeout)
        if self.compiled is not None:
            self.compiled.close()
        self._sock.close()

    def __enter__(self) -> 'SitlLink':
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def peer(self) -> Optional[Address]:
        """Return the SITL address answered (None before the first servo packet)."""
        return self.peers.peer

    @property
    def state(self) -> SensorState:
        """Return the state answered from (kept by the pacing, so that one is ever served)."""
        return self.pacing.state

    @state.setter
    def state(self, state: SensorState) -> None:
        self.pacing.state = state

    @property
    def on_wait(self) -> Optional[WaitCallback]:
        """Told, on the grid, each instant a frame is about to wait for (StatePacing)."""
        return self.pacing.on_wait

    @on_wait.setter
    def on_wait(self, on_wait: Optional[WaitCallback]) -> None:
        self.pacing.on_wait = on_wait

    @property
    def plain(self) -> bool:
        """Whether no frame is held, answered ahead or failed: the next frame is a plain one."""
        return self._held is None and self._ahead is None and self._failed_frame is None

    @property
    def held(self) -> bool:
        """Whether a frame waits for release(): read no datagram meanwhile, as SITL sends none."""
        return self._held is not None

    @property
    def udp_socket(self) -> socket.socket:
        """Return the UDP socket, for a server that reads many links' in one thread."""
        return self._sock

    def release(self, instant: Optional[Instant]) -> None:
        """
        Answer the frame held (HELD from on_frame) from the engine's instant.

        Its bookkeeping (after_reply) waits for bookkeep_released(), so that a fleet sends every
        reply before any vehicle's bookkeeping. No instant (the step failed): fail_held().
        """
        held = self._held
        if held is None:
            return
        if instant is None:
            self.fail_held('the world gave no instant for it')
            return
        self._held = None
        try:
            self._released = (held, self._serve(held, instant))
        except Exception as error:
            self._released = None
            self.warnings.error('release', f'{self._prefix}unexpected {error!r} answering frame '
                                           f'{held.packet.frame_count}')
            self.logger.debug('traceback of the error above', exc_info=True)

    def bookkeep_released(self) -> None:
        """Run the bookkeeping of the frame release() answered last."""
        released, self._released = self._released, None
        if released is not None:
            self._bookkeep(*released)

    def fail_held(self, reason: str) -> None:
        """
        Leave the frame held unanswered: SITL sends it again (1.1 s), and it is stepped again.

        As when on_frame fails: one reply a frame, never a reply from a state not stepped.
        """
        held, self._held = self._held, None
        if held is None:
            return
        if held.sent is not None:
            # Answered on arrival (stepped ahead): that reply stands, and SITL resends nothing.
            self.warnings.error('held_failed', f'{self._prefix}frame {held.packet.frame_count}: '
                                               f'{reason}; it was answered on arrival, and '
                                               'that reply stands')
            self._keep_sent_ahead(held.packet, held.sent, None)
            return
        self._failed_frame = held.packet.frame_count
        self._unanswered(held.packet, f'{reason}; it is stepped again when SITL resends it',
                         'held_failed', logging.ERROR)

    def _run(self) -> None:
        while not self._stopping.is_set():
            compiled = self.compiled
            if compiled is None or not compiled.ready():
                self.receive_one()
            elif not serve_compiled(compiled, self.logger, self._prefix):
                self.compiled = None

    def receive_one(self) -> None:
        """Read one datagram from the socket and handle it; a failure is said, not raised."""
        try:
            data, sender = self._sock.recvfrom(MAX_DATAGRAM)
        except OSError as error:
            self.receive_failed(error)
            return
        self.handle_received(data, sender)

    def receive_failed(self, error: OSError) -> None:
        """Say that reading the socket failed (rate-limited), unless the link is stopping."""
        if not self._stopping.is_set():
            self.warnings.warning('recv', f'{self._prefix}receive failed: {error}')

    def handle_received(self, data: bytes, sender: Tuple,
                        received: Optional[float] = None) -> None:
        """Handle a datagram read from the socket (at received); a failure is said, not raised."""
        if self._stopping.is_set():
            return
        try:
            if received is None:
                self.handle_datagram(data, sender[:2])
            else:
                self.handle_datagram(data, sender[:2], received)
        except Exception as error:
            self.warnings.error('unexpected', f'{self._prefix}unexpected {error!r} '
                                              f'handling a datagram from {sender[0]}:'
                                              f'{sender[1]}; the link carries on')
            self.logger.debug('traceback of the error above', exc_info=True)

    def handle_datagram(self, data: bytes, sender: Address,
                        received: Optional[float] = None) -> None:
        """Process one datagram as the link thread does (public for tests and tools)."""
        if received is None:
            received = self._clock()
        ahead = self._ahead
        if ahead is not None and data == ahead.datagram and sender == self.peers.peer:
            # The frame stepped ahead: its reply goes first, its handling (the same) after,
            # told that it was answered so that no second reply goes out.
            self.stats.answered_on_arrival += 1
            self._send(ahead.reply, received)
            self._handle(data, sender, received, ahead)
            return
        self._handle(data, sender, received, None)

    def _handle(self, data: bytes, sender: Address, received: float,
                sent: Optional[ReplyAhead]) -> None:
        """Handle a datagram; sent: the reply it got on arrival (stepped ahead), if any."""
        stats = self.stats
        stats.received += 1
        try:
            packet = decode_servo_packet(data)
        except ServoPacketError as error:
            stats.rejected += 1
            self.warnings.warning('rejected', f'{self._prefix}ignored a datagram from '
                                              f'{sender[0]}:{sender[1]}: {error}')
            return
        peer = self.peers.accept(sender, packet.frame_count, packet.channel_count, received,
                                 self.settings.peer_timeout)
        if peer is PeerVerdict.STRANGER:
            stats.strangers += 1
            return
        if peer is PeerVerdict.NEW_SESSION:
            stats.restarts += 1
            self._new_session()
        stats.peer = sender
        stats.last_packet = received
        stats.channel_count = packet.channel_count
        stats.frame_rate_hint = packet.frame_rate
        verdict = self.session.classify(packet.frame_count, received)
        if verdict.kind is FrameKind.RESTART:
            stats.restarts += 1
            self.logger.warning(f'{self._prefix}SITL restarted (frame {packet.frame_count} '
                                f'after {self._last_replied()}): new session, '
                                'time starts again at 0')
            self._new_session()
            verdict = self.session.classify(packet.frame_count, received)
        if verdict.kind is FrameKind.LATE:
            self._fault('late', 1, f'ignored frame {packet.frame_count}, older than frame '
                                   f'{self.session.last_frame} already here (late or reordered '
                                   'on the way; not a restart, which starts at frame 0)')
            return
        if verdict.kind is FrameKind.DUPLICATE:
            self._fault('duplicates', 1, f'did not answer frame {packet.frame_count} again: its '
                                         f'reply went out {received - self.session.replied_at:.3f}'
                                         ' s ago, too soon for SITL to resend it (a copy on the '
                                         'way); SITL reads one reply a frame')
            return
        if verdict.kind is FrameKind.RESENT:
            self._fault('resent', 1, f'SITL sent frame {packet.frame_count} again: its reply '
                                     'was lost; answered it again')
            if sent is None:
                self._send(self.session.last_reply, received)
            return
        if verdict.lost:
            self._fault('lost', verdict.lost, f'{verdict.lost} SITL frame(s) never reached the '
                                              f'bridge before frame {packet.frame_count}')
        retry = verdict.kind is FrameKind.RETRY
        if retry:
            # A lock-step engine steps the frame it failed again.
            answer = (self._publish(packet) if self._failed_frame == packet.frame_count
                      else None)
        else:
            stats.new_frames += 1
            answer = self._publish(packet)
        frame = FrameInHand(packet, data, received, retry, sent)
        if answer is HELD:
            self._held = frame
            return
        self._bookkeep(frame, self._serve(frame, answer))

    def _bookkeep(self, frame: FrameInHand, answered: bool) -> None:
        """
        After a new frame's reply: the source's bookkeeping, then stepping ahead.

        answered: whether the reply came from the engine's Instant (_serve).
        """
        if frame.retry:
            return
        if self.after_reply is not None:
            try:
                self.after_reply()
            except Exception as error:
                self.warnings.error('after_reply', f'{self._prefix}the bookkeeping after a '
                                                   f'reply failed: {error!r}')
        if answered and self.step_ahead is not None:
            self._step_ahead(frame.packet, frame.data)

    def _fault(self, counter: str, count: int, message: str) -> None:
        """Count a fault of the wire or of SITL's session in LinkStats; say it, rate-limited."""
        setattr(self.stats, counter, getattr(self.stats, counter) + count)
        self.warnings.warning(counter, self._prefix + message)

    def _new_session(self) -> None:
        self.session.reset()
        self._ahead = None
        if self.on_restart is not None:
            try:
                self.on_restart()
            except Exception as error:
                self.warnings.error('on_restart', f'{self._prefix}resetting the source after '
                                                  f'a SITL restart failed: {error!r}')

    def _last_replied(self) -> str:
        replied = self.session.replied_frame
        return 'no reply yet' if replied is None else f'frame {replied}'

    def _publish(self, packet: ServoPacket) -> FrameAnswer:
        """Hand the frame's PWM to on_frame; return its answer (None where it failed)."""
        if self.on_frame is None:
            return None
        self._failed_frame = None
        try:
            answer = self.on_frame(packet)
        except Exception as error:
            self._failed_frame = packet.frame_count
            self.warnings.error('on_frame', f'{self._prefix}frame {packet.frame_count}: '
                                            f'handing its PWM on failed: {error!r}')
            return None
        if not is_frame_answer(answer):
            self.warnings.error('frame_answer', f'{self._prefix}on_frame returned '
                                                f'{type(answer).__name__}, not an Instant, '
                                                'HELD or None: the state answers the frame')
            return None
        return answer

    def _serve(self, frame: FrameInHand, answer: FrameAnswer) -> bool:
        """
        Answer from the Instant a lock-step engine's on_frame gave, or else from the state.

        Returns whether the frame was answered from the engine's Instant.
        """
        packet, sent = frame.packet, frame.sent
        if isinstance(answer, Instant) and self._answer(packet, frame.received, answer, sent):
            return True
        if sent is not None:
            self._keep_sent_ahead(packet, sent, answer)
        else:
            self._reply(packet, frame.received)
        return False

    def _keep_sent_ahead(self, packet: ServoPacket, sent: ReplyAhead,
                         answer: FrameAnswer) -> None:
        """
        Keep the reply a frame got on arrival where its handling gave no such reply.

        on_frame failed (said already), or returned another Instant than step_ahead had: the
        reply sent stands, for the state and for SITL's resends of the frame.
        """
        if isinstance(answer, Instant):
            self.warnings.error('sent_ahead', f'{self._prefix}frame {packet.frame_count} was '
                                              'answered on arrival with the step ahead, but '
                                              'on_frame then gave another instant: the engine '
                                              'broke the rule of step_ahead')
        sequence = self.state.push_instant(sent.instant, served=True)
        self.session.record_reply(packet.frame_count, sent.reply, sequence, sent.instant.stamp,
                                  sent.timestamp)

    def _step_ahead(self, packet: ServoPacket, data: bytes) -> None:
        """Have the engine step the frame after packet (data) on a guess; encode its reply."""
        try:
            instant = self.step_ahead(packet)
        except Exception as error:
            self.warnings.error('step_ahead', f'{self._prefix}stepping ahead after frame '
                                              f'{packet.frame_count} failed: {error!r}')
            return
        session = self.session
        datagram = next_frame_datagram(data)
        if (not isinstance(instant, Instant) or instant.stamp <= session.last_stamp
                or datagram is None):
            return
        timestamp = session.timestamp_for(instant.stamp)
        try:
            reply, dropped = self._encoded(instant, timestamp)
        except ReplyError:
            return
        # A reply leaving values out is encoded when it is sent, which warns of them.
        if not dropped:
            self._ahead = ReplyAhead(datagram, instant, timestamp, reply)

    def _answer(self, packet: ServoPacket, received: float, instant: Instant,
                sent: Optional[ReplyAhead]) -> bool:
        """
        Answer a lock-step engine's frame from the instant it stepped to, then push it.

        The reply is the one the state would build from the pushed sample (the newest, at its
        own stamp), sent before the pushing and bookkeeping, which then overlap SITL's turn.
        Returns False, with the instant pushed, where the state must decide (grid pacing, a
        stamp not after the last served, values that cannot be sent): _reply answers then.
        """
        state, session = self.state, self.session
        ahead, self._ahead = self._ahead, None
        if sent is not None and sent.instant is not instant:
            return False  # _serve keeps the reply sent on arrival
        last = session.last_stamp
        if state.grid or (last is not None and instant.stamp <= last):
            state.push_instant(instant)
            return False
        timestamp = session.timestamp_for(instant.stamp)
        if sent is not None:
            data = sent.reply  # sent on arrival
        elif ahead is not None and ahead.instant is instant and ahead.timestamp == timestamp:
            data = ahead.reply
            self._send(data, received)
        else:
            try:
                data = self._encode(instant, timestamp)
            except ReplyError:
                state.push_instant(instant)
                return False
            self._send(data, received)
        sequence = state.push_instant(instant, served=True)
        session.record_reply(packet.frame_count, data, sequence, instant.stamp, timestamp)
        return True

    def _reply(self, packet: ServoPacket, received: float) -> None:
        timeout = (max(0.0, received + self.settings.fresh_timeout - self._clock())
                   if self.may_wait else 0.0)
        result = self.pacing.next_answer(packet, timeout)
        if isinstance(result, Unavailable):
            self.state.count_unanswered(result)
            self._unanswered(packet, str(result), f'unavailable:{result.input}:{result.level}',
                             result.level)
            return
        instant, timestamp = result
        try:
            data = self._encode(instant, timestamp)
        except ReplyError as error:
            self._unanswered(packet, str(error), 'reply_error')
            return
        self._send(data, received)
        session = self.session
        if session.grid is not None:
            session.grid.advance()
        session.record_reply(packet.frame_count, data, instant.sequence, instant.stamp,
                             timestamp)
        self.state.mark_served(instant.sequence)

    def _encoded(self, instant: Instant, timestamp: float) -> Tuple[bytes, Tuple[str, ...]]:
        """Return the reply for instant and the optional values it leaves out; ReplyError."""
        settings = self.settings
        return encode_reply(build_reply(instant, timestamp, settings.no_time_sync,
                                        settings.no_lockstep))

    def _encode(self, instant: Instant, timestamp: float) -> bytes:
        """Encode the reply for instant, warning of optional values left out; ReplyError."""
        data, dropped = self._encoded(instant, timestamp)
        if dropped:
            self.warnings.warning('dropped', f'{self._prefix}left out optional values that are '
                                             f'not finite: {", ".join(dropped)}')
        return data

    def _unanswered(self, packet: ServoPacket, reason: str, key: str,
                    level: int = logging.WARNING) -> None:
        self.stats.unanswered += 1
        self.warnings.log(level, key, f'{self._prefix}no reply to SITL frame '
                                      f'{packet.frame_count}: {reason}')

    def _send(self, data: bytes, received: float) -> None:
        """Send a reply to the peer; its latency counts from the datagram's arrival."""
        # When the reply left, for telling a copy of the frame from SITL's resend of it.
        self.session.replied_at = self._clock()
        try:
            self._sock.sendto(data, self.peers.peer)
        except OSError as error:
            self.send_failed(error)
            return
        self.stats.replied += 1
        self.stats.latency.add(self._clock() - received)

    def send_failed(self, error: OSError) -> None:
        """Say (rate-limited) that a reply to the peer could not be sent, and why."""
        self.warnings.warning('send', f'{self._prefix}reply to {self.peers.peer} failed: {error}')
