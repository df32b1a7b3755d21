"""
The JSON SITL link: a UDP socket, one SITL peer, one reply per servo packet.

Runs in its own thread and blocks on its socket (and, per frame, on the state's condition
variable), so an idle link costs no CPU and simulated time stopping cannot stall it.
"""

import errno
import logging
import socket
import threading
import time
from typing import Callable, NamedTuple, Optional, Tuple, Union

from ardupilot_json_bridge.core.protocol import (
    decode_servo_packet, encode_reply, next_frame_datagram, ReplyError, ServoPacket,
    ServoPacketError)
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.reply import build_reply
from ardupilot_json_bridge.core.settings import LinkSettings, SITL_BASE_PORT, SITL_PORT_STRIDE
from ardupilot_json_bridge.core.state import Instant, SensorState, Unavailable
from ardupilot_json_bridge.core.stats import LinkStats
from ardupilot_json_bridge.link.portowner import udp_port_owner
from ardupilot_json_bridge.link.session import FrameGrid, FrameKind, MAX_STEP, SitlSession

MAX_DATAGRAM = 65536

Address = Tuple[str, int]
# A lock-step engine's on_frame may return the Instant it stepped to, to be answered at once,
# or HELD: a fleet's world holds the frame, and release() answers it once the world stepped
# (or fail_held() leaves it to SITL's resend);
# anything else it returns (a source's controls) is not the link's.
FrameCallback = Callable[[ServoPacket], object]
RestartCallback = Callable[[], None]
# Lock-step through ROS: told the source instant a frame is about to wait for (None: any
# sample, before the first), so that the simulator can be stepped to it.
WaitCallback = Callable[[Optional[float]], None]


WHAT_TO_CHANGE = ('give them more CPU (fewer busy processes than cores), lower SIM_RATE_HZ (not '
                  "below the vehicle's loop rate, 400 for Copter) or run the simulator slower "
                  'than real time')


def falling_behind(grid: FrameGrid, backlog: float, passed: int, max_backlog: float) -> str:
    """Say in one line that SITL could not keep up with the source, and what to change."""
    if not passed:
        return (f'SITL fell {backlog:.3f} s behind physics (max_backlog {max_backlog} s): '
                f'catching up {MAX_STEP} frames a reply, so its clock keeps up with the '
                f'simulator while its frame rate drops to 1/{MAX_STEP}. SITL and the bridge are '
                f'not keeping up: {WHAT_TO_CHANGE}')
    return (f'SITL fell {backlog:.3f} s behind physics, too far to catch up {MAX_STEP} frames a '
            f'reply: passed over {passed} frame(s) ({passed / grid.rate:.3f} s) of physics, '
            "SITL's clock still stepping one frame at a time; it now runs "
            f'{grid.passed_over:.2f} s behind the simulator. SITL and the bridge cannot keep '
            f'up: {WHAT_TO_CHANGE}')


class Held:
    """What on_frame returns for a frame a fleet's world holds (the one instance HELD)."""

    def __repr__(self) -> str:
        return 'HELD'


HELD = Held()


class HeldFrame(NamedTuple):
    """A frame whose reply waits for the fleet's world to step (SitlLink.release)."""

    packet: ServoPacket
    data: bytes
    received: float
    retry: bool         # SITL sent it again after its on_frame failed


class ReplyAhead(NamedTuple):
    """The reply to the frame after the one answered, encoded while SITL computes it."""

    datagram: bytes     # the frame expected: the same PWM and rate, frame_count one on
    instant: Instant    # what the engine stepped ahead to, and will return from on_frame
    timestamp: float
    reply: bytes


class LinkError(RuntimeError):
    """The link cannot run; the message says why and what to do."""


def bind_udp(address: str, port: int, instance: int) -> socket.socket:
    """Bind the listening socket, explaining an address already in use."""
    family = socket.AF_INET6 if ':' in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.bind((address, port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            owner = udp_port_owner(port)
            culprit = f'it is held by {owner}' if owner else (
                "another bridge, Gazebo's ArduPilotPlugin or a second vehicle configured "
                'with the same instance is the usual culprit')
            raise LinkError(
                f'UDP port {port} on {address} (SITL instance {instance}) is already in use: '
                f'{culprit}. Stop it, or give each vehicle its own instance '
                f'(port {SITL_BASE_PORT} + {SITL_PORT_STRIDE} x instance).') from None
        raise LinkError(f'cannot listen on UDP {address}:{port} '
                        f'(SITL instance {instance}): {error.strerror}') from None
    return sock


class SitlLink:
    """Serves one SITL instance from a SensorState; calls on_frame for every new frame."""

    def __init__(self, settings: LinkSettings, state: SensorState,
                 on_frame: Optional[FrameCallback] = None,
                 logger: Optional[logging.Logger] = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_restart: Optional[RestartCallback] = None,
                 sock: Optional[socket.socket] = None,
                 after_reply: Optional[RestartCallback] = None,
                 step_ahead: Optional[FrameCallback] = None,
                 on_wait: Optional[WaitCallback] = None) -> None:
        """
        Bind the settings' port, or serve on sock, bound already by the caller.

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
        self.state = state
        self.on_frame = on_frame
        # The frame whose on_frame raised: SITL resends it unanswered, and it is tried again.
        self._failed_frame: Optional[int] = None
        self.on_restart = on_restart
        self.after_reply = after_reply
        self.step_ahead = step_ahead
        self.on_wait = on_wait
        self._ahead: Optional[ReplyAhead] = None
        # The reply the datagram in hand was answered with on arrival, until its handling ends.
        self._sent_ahead: Optional[ReplyAhead] = None
        self.logger = logger or logging.getLogger('ardupilot_json_bridge.link')
        self.warnings = RateLimitedLog(self.logger)
        self.stats = LinkStats()
        self.session = SitlSession()
        self._clock = clock
        self._prefix = f'SITL instance {settings.instance}: '
        self._sock = sock or bind_udp(settings.bind_address, settings.listen_port,
                                      settings.instance)
        self.address: Address = self._sock.getsockname()[:2]
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._peer: Optional[Address] = None
        self._peer_heard = 0.0
        self._held: Optional[HeldFrame] = None
        # The frame release() answered, whose bookkeeping is still to run, and whether it was
        # answered from the engine's instant (what stepping ahead needs).
        self._released: Optional[Tuple[HeldFrame, bool]] = None
        # False where one thread serves many links (a fleet): no frame may wait for the state.
        self.may_wait = True

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
            self._wake()
            self._thread.join(timeout)
        self._sock.close()

    def _wake(self) -> None:
        """Unblock the thread's recvfrom with an empty datagram to the link's own port."""
        host = self.address[0]
        if host in ('0.0.0.0', '::'):
            host = '127.0.0.1' if host == '0.0.0.0' else '::1'
        family = socket.AF_INET6 if ':' in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as waker:
            try:
                waker.sendto(b'', (host, self.address[1]))
            except OSError as error:
                self.logger.warning(f'{self._prefix}could not wake the link thread: {error}')

    def __enter__(self) -> 'SitlLink':
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def peer(self) -> Optional[Address]:
        return self._peer

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
            self._released = (held, self._serve(held.packet, held.received, instant))
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
        self._failed_frame = held.packet.frame_count
        self._unanswered(held.packet, f'{reason}; it is stepped again when SITL resends it',
                         'held_failed', logging.ERROR)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.receive_one()

    def receive_one(self) -> None:
        """Read one datagram from the socket and handle it; a failure is said, not raised."""
        try:
            data, sender = self._sock.recvfrom(MAX_DATAGRAM)
        except OSError as error:
            if not self._stopping.is_set():
                self.warnings.warning('recv', f'{self._prefix}receive failed: {error}')
            return
        if self._stopping.is_set():
            return
        try:
            self.handle_datagram(data, sender[:2])
        except Exception as error:
            self.warnings.error('unexpected', f'{self._prefix}unexpected {error!r} '
                                              f'handling a datagram from {sender[0]}:'
                                              f'{sender[1]}; the link carries on')
            self.logger.debug('traceback of the error above', exc_info=True)

    def handle_datagram(self, data: bytes, sender: Address) -> None:
        """Process one datagram as the link thread does (public for tests and tools)."""
        received = self._clock()
        ahead = self._ahead
        if ahead is not None and data == ahead.datagram and sender == self._peer:
            # The frame stepped ahead: its reply goes first, its handling (the same) after.
            self.stats.answered_on_arrival += 1
            self._send(ahead.reply, received)
            self._sent_ahead = ahead
            try:
                self._handle(data, sender, received)
            finally:
                self._sent_ahead = None
            return
        self._handle(data, sender, received)

    def _handle(self, data: bytes, sender: Address, received: float) -> None:
        stats = self.stats
        stats.received += 1
        try:
            packet = decode_servo_packet(data)
        except ServoPacketError as error:
            stats.rejected += 1
            self.warnings.warning('rejected', f'{self._prefix}ignored a datagram from '
                                              f'{sender[0]}:{sender[1]}: {error}')
            return
        if not self._accept_peer(sender, packet, received):
            return
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
            self._send(self.session.last_reply, received)
            return
        if verdict.lost:
            self._fault('lost', verdict.lost, f'{verdict.lost} SITL frame(s) never reached the '
                                              f'bridge before frame {packet.frame_count}')
        retry = verdict.kind is FrameKind.RETRY
        if retry:
            # A lock-step engine steps the frame it failed again.
            published = (self._publish(packet) if self._failed_frame == packet.frame_count
                         else None)
        else:
            stats.new_frames += 1
            published = self._publish(packet)
        frame = HeldFrame(packet, data, received, retry)
        if published is HELD:
            self._held = frame
            return
        self._bookkeep(frame, self._serve(packet, received, published))

    def _bookkeep(self, frame: HeldFrame, answered: bool) -> None:
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

    def _accept_peer(self, sender: Address, packet: ServoPacket, now: float) -> bool:
        peer = self._peer
        if peer is None:
            self.logger.info(f'{self._prefix}SITL connected from {sender[0]}:{sender[1]} '
                             f'({packet.channel_count} channels, frame {packet.frame_count})')
        elif sender != peer:
            silent = now - self._peer_heard
            if packet.frame_count == 0:
                self.logger.warning(f'{self._prefix}SITL restarted at {sender[0]}:{sender[1]} '
                                    f'(frame 0; it was at {peer[0]}:{peer[1]}, heard '
                                    f'{silent:.1f} s ago): new session, time starts again at 0')
            elif silent <= self.settings.peer_timeout:
                self.stats.strangers += 1
                self.warnings.warning(
                    'stranger', f'{self._prefix}ignored servo packets from {sender[0]}:'
                                f'{sender[1]} (frame {packet.frame_count}): locked to SITL at '
                                f'{peer[0]}:{peer[1]}, heard {silent:.1f} s ago. Two SITL '
                                'instances on one port? Give each vehicle its own -I instance.')
                return False
            else:
                self.logger.warning(f'{self._prefix}SITL moved from {peer[0]}:{peer[1]} to '
                                    f'{sender[0]}:{sender[1]} after {silent:.1f} s of silence '
                                    '(restarted?): new session')
            self.stats.restarts += 1
            self._new_session()
        self._peer = sender
        self.stats.peer = sender
        self._peer_heard = now
        return True

    def _publish(self, packet: ServoPacket) -> object:
        if self.on_frame is None:
            return None
        self._failed_frame = None
        try:
            return self.on_frame(packet)
        except Exception as error:
            self._failed_frame = packet.frame_count
            self.warnings.error('on_frame', f'{self._prefix}frame {packet.frame_count}: '
                                            f'handing its PWM on failed: {error!r}')
            return None

    def _serve(self, packet: ServoPacket, received: float, published: object) -> bool:
        """
        Answer from the Instant a lock-step engine's on_frame gave, or else from the state.

        Returns whether the frame was answered from the engine's Instant.
        """
        if isinstance(published, Instant) and self._answer(packet, received, published):
            return True
        sent = self._sent_ahead
        if sent is not None:
            self._keep_sent_ahead(packet, sent, published)
        else:
            self._reply(packet, received)
        return False

    def _keep_sent_ahead(self, packet: ServoPacket, sent: ReplyAhead, published: object) -> None:
        """
        Keep the reply a frame got on arrival where its handling gave no such reply.

        on_frame failed (said already), or returned another Instant than step_ahead had: the
        reply sent stands, for the state and for SITL's resends of the frame.
        """
        self._sent_ahead = None
        if isinstance(published, Instant):
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

    def _answer(self, packet: ServoPacket, received: float, instant: Instant) -> bool:
        """
        Answer a lock-step engine's frame from the instant it stepped to, then push it.

        The reply is the one the state would build from the pushed sample (the newest, at its
        own stamp), sent before the pushing and bookkeeping, which then overlap SITL's turn.
        Returns False, with the instant pushed, where the state must decide (grid pacing, a
        stamp not after the last served, values that cannot be sent): _reply answers then.
        """
        state, session = self.state, self.session
        ahead, self._ahead = self._ahead, None
        sent = self._sent_ahead
        if sent is not None and sent.instant is not instant:
            return False  # _serve keeps the reply sent on arrival
        last = session.last_stamp
        if state.grid or (last is not None and instant.stamp <= last):
            state.push_instant(instant)
            return False
        timestamp = session.timestamp_for(instant.stamp)
        if sent is not None:
            data, self._sent_ahead = sent.reply, None  # sent on arrival
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
        if self.state.grid:
            result = self._grid_instant(packet, timeout)
        else:
            result = self._sample_instant(timeout)
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

    def _grid_instant(self, packet: ServoPacket,
                      timeout: float) -> Union[Tuple[Instant, float], Unavailable]:
        """
        Return the instant of SITL's next frame on the grid, and its timestamp.

        A clock jump back while the frame waits restarts the grid and the wait at once.
        """
        deadline = self._clock() + timeout
        while True:
            result = self._grid_attempt(packet, max(0.0, deadline - self._clock()))
            if not (isinstance(result, Unavailable) and self.session.resets != self.state.resets):
                return result

    def _grid_attempt(self, packet: ServoPacket,
                      timeout: float) -> Union[Tuple[Instant, float], Unavailable]:
        """One wait for the next grid instant; ends early if the source's clock jumps back."""
        state, session = self.state, self.session
        grid = session.grid
        if grid is None or session.resets != state.resets:
            if state.newest_primary() is None:
                self._wait_for(None)
            newest = state.wait_for_primary(timeout)
            if newest is None:
                return Unavailable(state.primary, 'no message received yet')
            if grid is None:
                grid = session.grid = FrameGrid(newest, packet.frame_rate)
            else:
                # From the last stamp served; before any reply, the instant SITL asked for.
                before = session.last_stamp
                self._went_back(grid.stamp_of(grid.index + 1) if before is None else before,
                                newest)
                grid.restart_at(newest)
            session.resets = state.resets
        stamp = grid.next_instant(packet.frame_rate)
        newest = state.newest_primary()
        if newest is not None:
            catching = grid.step > 1
            passed = grid.catch_up(newest, state.settings.max_backlog)
            if passed or (grid.step > 1 and not catching):
                self.stats.skipped += passed
                message = falling_behind(grid, newest - stamp, passed,
                                         state.settings.max_backlog)
                self.warnings.warning('skipped' if passed else 'behind', self._prefix + message)
            stamp = grid.next_instant(packet.frame_rate)
        self._wait_for(stamp)
        result = state.wait_for_stamp(stamp, timeout, session.resets)
        if isinstance(result, Unavailable):
            return result
        return result, grid.next_timestamp()

    def _wait_for(self, stamp: Optional[float]) -> None:
        """Tell on_wait the instant a frame waits for; a failure is said and waited out."""
        if self.on_wait is None:
            return
        try:
            self.on_wait(stamp)
        except Exception as error:
            self.warnings.error('on_wait', f'{self._prefix}asking for physics at the instant '
                                           f'SITL waits for failed: {error!r}')

    def _sample_instant(self, timeout: float) -> Union[Tuple[Instant, float], Unavailable]:
        """Return the next primary sample's instant (lock-step sources), and its timestamp."""
        state, session = self.state, self.session
        deadline = self._clock() + timeout
        after = session.served_sequence
        while True:
            result = state.wait_for_sample(after, max(0.0, deadline - self._clock()))
            if isinstance(result, Unavailable):
                if result.sequence:
                    # A sample that cannot be served (no odometry near it) is passed over, so
                    # a lock-step source moves on to the next one instead of waiting for good.
                    session.served_sequence = result.sequence
                    state.mark_served(result.sequence)
                    self.stats.skipped += 1
                return result
            if session.last_stamp is not None and result.stamp < session.last_stamp:
                self._went_back(session.last_stamp, result.stamp)
            timestamp = session.timestamp_for(result.stamp)
            if timestamp is not None:
                break
            after = result.sequence
        if result.skipped:
            self.stats.skipped += result.skipped
            self.warnings.warning('skipped', f'{self._prefix}SITL fell more than '
                                             f'{state.settings.max_backlog} s behind physics: '
                                             f'skipped {result.skipped} sample(s) to catch up')
        return result, timestamp

    def _went_back(self, before: float, after: float) -> None:
        """Warn (rate-limited) that physics time went back, or that it alternates two clocks."""
        two_clocks = self.state.two_clocks
        if two_clocks is not None:
            ahead, behind = two_clocks
            self.warnings.warning('two_clocks', f'{self._prefix}{self.state.primary} stamps '
                                                f'alternate between two clocks, {ahead:.3f} and '
                                                f'{behind:.3f} s (two publishers on one topic?): '
                                                'each jump back restarts the physics time '
                                                'served; publish one clock')
            return
        self.warnings.warning('went_back', f'{self._prefix}physics time went back from '
                                           f'{before:.3f} to {after:.3f} s (simulation reset or '
                                           'looping bag): SITL time carries on from where it was')

    def _unanswered(self, packet: ServoPacket, reason: str, key: str,
                    level: int = logging.WARNING) -> None:
        self.stats.unanswered += 1
        self.warnings.log(level, key, f'{self._prefix}no reply to SITL frame '
                                      f'{packet.frame_count}: {reason}')

    def _send(self, data: bytes, received: float) -> None:
        if self._sent_ahead is not None:
            return  # the frame in hand was answered on arrival: one reply a frame
        # When the reply left, for telling a copy of the frame from SITL's resend of it.
        self.session.replied_at = self._clock()
        try:
            self._sock.sendto(data, self._peer)
        except OSError as error:
            self.warnings.warning('send', f'{self._prefix}reply to {self._peer} failed: {error}')
            return
        self.stats.replied += 1
        self.stats.latency.add(self._clock() - received)
