"""
The SITL link in a process of its own, fed samples through a socket.

A busy ROS executor holds Python's GIL most of the time; a link thread beside it waits for the
GIL on every frame, and SITL then runs at a fraction of its rate. Here the node keeps the
subscriptions and the publishers, and a child process (no ROS) keeps the state and the link:
samples go down a Unix SEQPACKET socket, frames' PWM, statistics and log lines come back.

Parent side: LinkProcess, with the same push_* methods as SensorState, so input routes feed
it unchanged. Child side: `python -m ardupilot_json_bridge.link.link_process`, whose
serve_channel wires one piece per job: the link and its state (SitlLink), the samples coming
in (SampleInlet), the PWM going out (PwmForwarder), the convention checks (LiveChecks) and
the statistics (send_stats, every STATS_PERIOD).
"""

import argparse
import json
import logging
import math
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from ardupilot_json_bridge.checks.conventions import (
    ConventionChecker, observe_imu, observe_odometry)
from ardupilot_json_bridge.checks.live import LIVE_WINDOW, LiveConventions
from ardupilot_json_bridge.config import BridgeConfig, config_from_parameters, SIM_CONTROL_NONE
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.state import history_length, input_names, SensorState
from ardupilot_json_bridge.core.stats import InputMeter, LinkStats
from ardupilot_json_bridge.link.sitl_link import SitlLink
from ardupilot_json_bridge.messages.inputs import stamp_seconds
from ardupilot_json_bridge.messages.routes import (
    deliver, IMU_TYPE, input_routes, InputRoute, ODOMETRY_TYPE, serialized,
    SERIALIZED_DECODERS)
from ardupilot_json_bridge.messages.servo_pwm import encode_servo_pwm

IMU, ODOMETRY, RANGE, WIND, AIRSPEED, BATTERY, RC, REJECTED, SETTINGS = b'IORWABCXU'
# The node's clock (s) as the IMU message that follows arrived: for the live clock check.
CLOCK = ord('K')
# A serialized message of the input route whose index (in input_routes order) follows.
SERIALIZED = ord('M')
# Child to parent: PWM for the commands, serialized servo_pwm messages, statistics, log lines,
# and the settings applied.
PWM, RECORDED, STATS, LOG, APPLIED = b'PFSLA'
# Child to parent, lock-step through ROS: the source instant a SITL frame waits for (NaN:
# any sample, before the first), for the parent to step the simulator to.
WAIT = ord('W')
WAIT_FORMAT = '<d'
STATS_PERIOD = 1.0
# Unchanged PWM is forwarded for the commands no more often than this (s).
COMMAND_REFRESH = 0.02
# Every frame's PWM goes for servo_pwm in batches at most this old (s) or this long. Each
# message wakes the node's reader thread: 10 ms batches slowed real SITL to 40 frames/s in
# benchmarks/node_cpu.py, 50 ms batches kept it at 1200.
RECORD_LATENCY = 0.05
RECORD_BATCH = 64
MAX_MESSAGE = 65536


class LinkProcess:
    """Runs the link in a child process and forwards samples to it (parent side)."""

    def __init__(self, parameters: Dict[str, Any], udp: socket.socket,
                 on_pwm: Callable[[List[int], int, float], None],
                 logger: logging.Logger,
                 on_recorded: Optional[Callable[[bytes], None]] = None,
                 on_ended: Optional[Callable[[str], None]] = None,
                 on_wait: Optional[Callable[[Optional[float]], None]] = None) -> None:
        """
        Start the child on the bound udp socket.

        on_pwm(pwm, frame_rate, stamp) gets PWM for the commands (changed, or every
        COMMAND_REFRESH), with the physics time of the state SITL computed it from (NaN before
        the first reply); on_recorded(message) every new frame's servo_pwm (servo_pwm.py),
        serialized (CDR), when raw_pwm_topic is set; on_ended(why) is told once if the child
        ends before close(); on_wait(instant) each instant a frame waits for, when sim_control
        steps the simulator (None: any sample, before the first).
        """
        self.logger = logger
        self.on_ended = on_ended
        # Why the child ended before close() was called: SITL is no longer served.
        self.ended: Optional[str] = None
        self._closing = False
        # Publishing fails per frame while it fails at all (rclpy shutting down): said once.
        self.warnings = RateLimitedLog(logger)
        self.on_pwm = on_pwm
        self.on_recorded = on_recorded
        self.on_wait = on_wait
        self.stats = LinkStats()
        config = config_from_parameters(parameters)
        self.meters: List[InputMeter] = [InputMeter(name) for name in input_names(config.state)]
        # The newest convention checks of the link process (conventions.Check).
        self.conventions: List[Any] = []
        # What the link process applies: (LinkSettings, StateSettings, history length in s).
        self.applied = (config.link, config.state, history_length(config.state))
        self._channel, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._send = self._channel.send
        self._sendmsg = self._channel.sendmsg
        self.process = subprocess.Popen(
            [sys.executable, '-m', 'ardupilot_json_bridge.link.link_process',
             '--udp-fd', str(udp.fileno()), '--channel-fd', str(child.fileno()),
             '--parameters', json.dumps(parameters)],
            pass_fds=(udp.fileno(), child.fileno()))
        child.close()
        self._reader = threading.Thread(target=self._read, daemon=True, name='link-process')
        self._reader.start()

    def _forward(self, kind: int, payload: Any) -> None:
        try:
            self._send(bytes((kind,)) + pickle.dumps(payload, pickle.HIGHEST_PROTOCOL))
        except OSError:
            pass  # the child is gone; _read says so once

    def push_imu(self, sample: Any) -> None:
        self._forward(IMU, sample)

    def push_odometry(self, sample: Any) -> None:
        self._forward(ODOMETRY, sample)

    def push_range(self, index: int, sample: Any) -> None:
        self._forward(RANGE, (index, sample))

    def push_wind(self, sample: Any) -> None:
        self._forward(WIND, sample)

    def push_airspeed(self, sample: Any) -> None:
        self._forward(AIRSPEED, sample)

    def push_battery(self, sample: Any) -> None:
        self._forward(BATTERY, sample)

    def push_rc(self, sample: Any) -> None:
        self._forward(RC, sample)

    def push_clock(self, now: float) -> None:
        """Forward the node's clock on receipt of the IMU message forwarded next."""
        self._forward(CLOCK, now)

    def push_serialized(self, route_index: int, data: bytes) -> None:
        """Forward a message as rclpy received it raw, for the child to decode."""
        try:
            self._sendmsg((bytes((SERIALIZED, route_index)), data))
        except OSError:
            pass

    def count_rejected(self, name: str) -> None:
        self._forward(REJECTED, name)

    def update_settings(self, link: Any, state: Any) -> None:
        """Apply new LinkSettings and StateSettings for the running link."""
        self._forward(SETTINGS, (link, state))

    def _read(self) -> None:
        levels = logging.getLevelName
        while True:
            try:
                data = self._channel.recv(MAX_MESSAGE)
            except OSError:
                # The child gone with samples it never read resets the channel (ECONNRESET)
                # rather than ending it: the same end.
                data = b''
            if not data:
                if not self._closing:
                    self._ended()
                return
            kind, body = data[0], data[1:]
            if kind == PWM:
                count = (len(body) - 10) // 2
                stamp, frame_rate, *pwm = struct.unpack(f'<dH{count}H', body)
                try:
                    self.on_pwm(pwm, frame_rate, stamp)
                except Exception as error:
                    self.warnings.error('on_pwm', f'publishing actuator commands failed: '
                                                  f'{error!r}')
            elif kind == WAIT:
                self._waiting(body)
            elif kind == RECORDED:
                self._publish_recorded(body)
            elif kind == STATS:
                self.stats, self.meters, self.conventions = pickle.loads(body)
            elif kind == APPLIED:
                self.applied = pickle.loads(body)
            elif kind == LOG:
                level, text = body[0], body[1:].decode('utf-8', 'replace')
                self.logger.log(level if levels(level) else logging.INFO, text)

    def _ended(self) -> None:
        """Say once why the child closed its channel unasked (killed, or crashed)."""
        try:
            code = self.process.wait(STATS_PERIOD)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            how = f'was killed by {signal_name(-code)}'
        else:
            how = f'ended with exit code {code}' if code is not None else 'closed its channel'
        self.ended = f'the link process {how}: SITL is no longer served'
        self.logger.error(self.ended)
        if self.on_ended is not None:
            self.on_ended(self.ended)

    def _waiting(self, body: bytes) -> None:
        """Hand on_wait the instant a frame waits for."""
        if self.on_wait is None:
            return
        (instant,) = struct.unpack(WAIT_FORMAT, body)
        try:
            self.on_wait(None if math.isnan(instant) else instant)
        except Exception as error:
            self.warnings.error('on_wait', f'stepping the simulator failed: {error!r}')

    def _publish_recorded(self, batch: bytes) -> None:
        """Hand each serialized message of a batch to on_recorded, in frame order."""
        if self.on_recorded is None:
            return
        at = 0
        try:
            while at < len(batch):
                (size,) = struct.unpack_from('<H', batch, at)
                self.on_recorded(batch[at + 2:at + 2 + size])
                at += 2 + size
        except Exception as error:
            self.warnings.error('on_recorded', f'publishing the raw PWM failed: {error!r}')

    def close(self, timeout: float = 3.0) -> None:
        """Stop the child (closing its channel) and wait for it."""
        self._closing = True
        try:
            self._channel.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._channel.close()


def signal_name(number: int) -> str:
    """Return a signal's name (SIGKILL), or its number where it has none."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f'signal {number}'


class ChannelLogHandler(logging.Handler):
    """Child side: log records go to the parent, which logs them as its own."""

    def __init__(self, channel: socket.socket) -> None:
        super().__init__()
        self._channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record).encode('utf-8')[:MAX_MESSAGE - 2]
            self._channel.send(bytes((LOG, min(record.levelno, 255))) + text)
        except OSError:
            pass


def channel_logger(channel: socket.socket) -> logging.Logger:
    """Child side: the package's logger, speaking through the parent."""
    logger = logging.getLogger('ardupilot_json_bridge')
    logger.addHandler(ChannelLogHandler(channel))
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


class PwmForwarder:
    """
    Child side: each new frame's PWM to the parent, for the commands and the recording.

    Each goes stamped with physics_time(), the physics time of the state SITL computed the PWM
    from (the last reply's): None before the session's first reply, whose frame is then not
    recorded (SITL's initial outputs, before it has seen any state). ArduPilot changes its
    outputs at its loop rate, a third of the frame rate: for the commands, repeats are not
    forwarded, except every COMMAND_REFRESH, so that each publish is news. For the recording
    (servo_pwm) every new frame goes, serialized here, in batches at most RECORD_LATENCY old,
    so the parent wakes once per batch and publishes each as it came.
    A batch that no later frame fills (SITL running slowly, or stopped) is sent by a thread
    that sleeps until the batch comes due.
    """

    def __init__(self, channel: socket.socket, record: bool,
                 clock: Callable[[], float] = time.monotonic,
                 physics_time: Callable[[], Optional[float]] = lambda: None) -> None:
        self._channel = channel
        self.physics_time = physics_time
        self._record = record
        self._clock = clock
        self._sent: Optional[List[int]] = None
        self._sent_at = 0.0
        self._batch: List[bytes] = []
        self._batch_started = 0.0
        self._condition = threading.Condition()
        self._stopped = False
        self._flusher: Optional[threading.Thread] = None

    def start(self) -> None:
        """Start sending batches as they come due (when recording)."""
        if self._record and self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_when_due, daemon=True,
                                             name='servo-pwm-batches')
            self._flusher.start()

    def stop(self) -> None:
        """Stop the batch thread and send what the batch holds."""
        with self._condition:
            self._stopped = True
            self._condition.notify_all()
        if self._flusher is not None:
            self._flusher.join()
            self._flusher = None
        self.flush()

    def on_frame(self, packet: Any) -> None:
        """Take a new frame's PWM (the link's on_frame, called in the link thread)."""
        pwm, now, stamp = packet.pwm, self._clock(), self.physics_time()
        if self._record and stamp is not None:
            self._add_to_batch(encode_servo_pwm(stamp, pwm), now)
        if pwm == self._sent and now - self._sent_at < COMMAND_REFRESH:
            return
        self._channel.send(bytes((PWM,)) + struct.pack(
            f'<dH{len(pwm)}H', math.nan if stamp is None else stamp, packet.frame_rate, *pwm))
        self._sent, self._sent_at = pwm, now     # once sent: a failed send is tried again

    def _add_to_batch(self, message: bytes, now: float) -> None:
        with self._condition:
            if not self._batch:
                self._batch_started = now
                self._condition.notify_all()
            self._batch.append(struct.pack('<H', len(message)) + message)
            if (now - self._batch_started < RECORD_LATENCY
                    and len(self._batch) < RECORD_BATCH):
                return
            batch, self._batch = self._batch, []
        self._send_batch(batch)

    def _flush_when_due(self) -> None:
        """Batch thread: wait for a batch, then until it is RECORD_LATENCY old; send it."""
        while True:
            with self._condition:
                while True:
                    if self._stopped:
                        return
                    remaining = self._batch_started + RECORD_LATENCY - self._clock()
                    if self._batch and remaining <= 0.0:
                        break
                    self._condition.wait(remaining if self._batch else None)
                batch, self._batch = self._batch, []
            self._send_batch(batch)

    def _send_batch(self, batch: List[bytes]) -> None:
        try:
            self._channel.send(bytes((RECORDED,)) + b''.join(batch))
        except OSError:
            pass

    def flush(self) -> None:
        """Send what the batch holds (SITL stopped sending frames before it was full)."""
        with self._condition:
            batch, self._batch = self._batch, []
        if batch:
            self._send_batch(batch)


class LiveChecks:
    """Child side: the convention checks, fed the raw IMU and odometry messages as decoded."""

    def __init__(self, config: BridgeConfig, logger: logging.Logger) -> None:
        self.checker = ConventionChecker(config.inputs.imu_mounting_rpy,
                                         config.inputs.odom_twist_frame, LIVE_WINDOW)
        self.conventions = LiveConventions(self.checker, logger)
        self._clock_on_receipt: Optional[float] = None

    def clock_on_receipt(self, now: float) -> None:
        """Keep the node's clock as the next IMU message arrived, for the clock check."""
        self._clock_on_receipt = now

    def on_imu(self, message: Any) -> None:
        stamp = stamp_seconds(message.header)
        observe_imu(self.checker, message, stamp)
        if self._clock_on_receipt is not None:
            self.checker.add_clock(stamp, self._clock_on_receipt)
            self._clock_on_receipt = None

    def on_odometry(self, message: Any) -> None:
        observe_odometry(self.checker, message, stamp_seconds(message.header))

    def routes(self, config: BridgeConfig, state: SensorState) -> List[InputRoute]:
        """Return the input routes; those of serialized types feed the checks on the way."""
        observers = {IMU_TYPE: self.on_imu, ODOMETRY_TYPE: self.on_odometry}
        return [serialized(route, observers[route.msgtype])
                if route.msgtype in SERIALIZED_DECODERS else route
                for route in input_routes(config, state)]


class SampleInlet:
    """Child side: what comes down the channel, pushed into the state or applied."""

    def __init__(self, channel: socket.socket, link: SitlLink, checks: LiveChecks,
                 config: BridgeConfig, logger: logging.Logger) -> None:
        state = link.state
        self._channel = channel
        self._link = link
        self._routes = checks.routes(config, state)
        self._warnings = RateLimitedLog(logger)
        self._pushes = {
            SETTINGS: self._apply, IMU: state.push_imu, ODOMETRY: state.push_odometry,
            WIND: state.push_wind, AIRSPEED: state.push_airspeed, BATTERY: state.push_battery,
            RC: state.push_rc, RANGE: lambda item: state.push_range(*item),
            REJECTED: state.count_rejected, CLOCK: checks.clock_on_receipt}

    def handle(self, data: bytes) -> None:
        if data[0] == SERIALIZED:
            # No receive time: the serialized types all carry a header stamp.
            deliver(self._routes[data[1]], data[2:], 0.0, self._link.state, self._warnings)
        else:
            self._pushes[data[0]](pickle.loads(data[1:]))

    def _apply(self, settings: Any) -> None:
        """Apply new link and state settings, and tell the parent what now applies."""
        link = self._link
        link.settings, link.state.settings = settings
        self._channel.send(bytes((APPLIED,)) + pickle.dumps(
            (link.settings, link.state.settings, link.state.keep), pickle.HIGHEST_PROTOCOL))


def wait_sender(channel: socket.socket) -> Callable[[Optional[float]], None]:
    """Child side: the link's on_wait, telling the parent what instant a frame waits for."""
    def send(instant: Optional[float]) -> None:
        channel.send(bytes((WAIT,)) + struct.pack(
            WAIT_FORMAT, math.nan if instant is None else instant))
    return send


def send_stats(channel: socket.socket, link: SitlLink, checks: LiveChecks) -> None:
    """Child side: the link's counters, the inputs' meters and the checks' verdicts."""
    channel.send(bytes((STATS,)) + pickle.dumps(
        (link.stats, list(link.state.meters.values()), checks.conventions.latest),
        pickle.HIGHEST_PROTOCOL))


def serve_channel(parameters: Dict[str, Any], udp_fd: int, channel_fd: int) -> int:
    """Child side: the state and the link, fed from the channel until it closes."""
    channel = socket.socket(fileno=channel_fd)
    logger = channel_logger(channel)
    config = config_from_parameters(parameters)
    forwarder = PwmForwarder(channel, record=bool(config.raw_pwm_topic))
    link = SitlLink(config.link, SensorState(config.state, logger=logger),
                    on_frame=forwarder.on_frame, logger=logger,
                    sock=socket.socket(fileno=udp_fd),
                    on_wait=(None if config.sim_control == SIM_CONTROL_NONE
                             else wait_sender(channel)))
    forwarder.physics_time = lambda: link.session.last_stamp
    checks = LiveChecks(config, logger)
    inlet = SampleInlet(channel, link, checks, config, logger)
    link.start()
    forwarder.start()
    checks.conventions.start()
    channel.settimeout(STATS_PERIOD)
    next_stats = time.monotonic() + STATS_PERIOD
    try:
        while True:
            try:
                data = channel.recv(MAX_MESSAGE)
            except socket.timeout:
                data = None
            if data == b'':
                return 0
            if data:
                inlet.handle(data)
            now = time.monotonic()
            if now >= next_stats:
                next_stats = now + STATS_PERIOD
                send_stats(channel, link, checks)
    except OSError:
        return 0
    finally:
        checks.conventions.stop()
        link.stop()
        forwarder.stop()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description='The SITL link, fed by a ROS node.')
    parser.add_argument('--udp-fd', type=int, required=True)
    parser.add_argument('--channel-fd', type=int, required=True)
    parser.add_argument('--parameters', required=True)
    args = parser.parse_args(argv)
    # The node decides when the link ends, by closing the channel (or by dying, which closes
    # it too): Ctrl-C in a terminal, or SIGTERM, to the whole process group reaches this
    # process as well, and its ending first would read as the link dying under the node.
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    return serve_channel(json.loads(args.parameters), args.udp_fd, args.channel_fd)


if __name__ == '__main__':
    os.environ.setdefault('PYTHONUNBUFFERED', '1')
    sys.exit(main())
