"""
The SITL link in a process of its own, fed samples through a socket.

A busy ROS executor holds Python's GIL most of the time; a link thread beside it waits for the
GIL on every frame, and SITL then runs at a fraction of its rate. Here the node keeps the
subscriptions and the publishers, and a child process (no ROS) keeps the state and the link:
samples go down a Unix SEQPACKET socket, frames' PWM, statistics and log lines come back.

Parent side: LinkProcess, with the same push_* methods as SensorState, so input routes feed
it unchanged. Child side: `python -m ardupilot_json_bridge.link.link_process`.
"""

import argparse
import json
import logging
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from ardupilot_json_bridge.config import config_from_parameters
from ardupilot_json_bridge.core.state import input_names
from ardupilot_json_bridge.core.stats import InputMeter, LinkStats

IMU, ODOMETRY, RANGE, WIND, AIRSPEED, BATTERY, RC, REJECTED, SETTINGS = b'IORWABCXU'
# The node's clock (s) as the IMU message that follows arrived: for the live clock check.
CLOCK = ord('K')
# A serialized message of the input route whose index (in input_routes order) follows.
SERIALIZED = ord('M')
PWM, STATS, LOG = b'PSL'
STATS_PERIOD = 1.0
# Unchanged PWM is forwarded for publishing no more often than this (s).
COMMAND_REFRESH = 0.02
MAX_MESSAGE = 65536


class LinkProcess:
    """Runs the link in a child process and forwards samples to it (parent side)."""

    def __init__(self, parameters: Dict[str, Any], udp: socket.socket,
                 on_pwm: Callable[[List[int], int], None],
                 logger: logging.Logger) -> None:
        self.logger = logger
        self.on_pwm = on_pwm
        self.stats = LinkStats()
        settings = config_from_parameters(parameters).state
        self.meters: List[InputMeter] = [InputMeter(name) for name in input_names(settings)]
        # The newest convention checks of the link process (conventions.Check).
        self.conventions: List[Any] = []
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
                return
            if not data:
                if self.process.poll() not in (None, 0):
                    self.logger.error(f'the link process ended with exit code '
                                      f'{self.process.returncode}')
                return
            kind, body = data[0], data[1:]
            if kind == PWM:
                count = (len(body) - 2) // 2
                frame_rate, *pwm = struct.unpack(f'<H{count}H', body)
                try:
                    self.on_pwm(pwm, frame_rate)
                except Exception as error:
                    self.logger.error(f'publishing actuator commands failed: {error!r}')
            elif kind == STATS:
                self.stats, self.meters, self.conventions = pickle.loads(body)
            elif kind == LOG:
                level, text = body[0], body[1:].decode('utf-8', 'replace')
                self.logger.log(level if levels(level) else logging.INFO, text)

    def close(self, timeout: float = 3.0) -> None:
        """Stop the child (closing its channel) and wait for it."""
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


def serve_channel(parameters: Dict[str, Any], udp_fd: int, channel_fd: int) -> int:
    """Child side: the state and the link, fed from the channel until it closes."""
    from ardupilot_json_bridge.checks.conventions import ConventionChecker, observe_imu, \
        observe_odometry
    from ardupilot_json_bridge.checks.live import LIVE_WINDOW, LiveConventions
    from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
    from ardupilot_json_bridge.core.state import SensorState
    from ardupilot_json_bridge.link.sitl_link import SitlLink
    from ardupilot_json_bridge.messages.inputs import stamp_seconds
    from ardupilot_json_bridge.messages.routes import (
        deliver, IMU_TYPE, input_routes, ODOMETRY_TYPE, serialized, SERIALIZED_DECODERS)
    channel = socket.socket(fileno=channel_fd)
    logger = logging.getLogger('ardupilot_json_bridge')
    logger.addHandler(ChannelLogHandler(channel))
    logger.setLevel(logging.INFO)
    logger.propagate = False
    config = config_from_parameters(parameters)
    state = SensorState(config.state, logger=logger)

    sent = {'pwm': None, 'at': 0.0}

    def on_frame(packet: Any) -> None:
        # ArduPilot changes its outputs at its loop rate, a third of the frame rate: repeats
        # are not forwarded, except every COMMAND_REFRESH, so that each publish is news.
        pwm, now = packet.pwm, time.monotonic()
        if pwm == sent['pwm'] and now - sent['at'] < COMMAND_REFRESH:
            return
        sent['pwm'], sent['at'] = pwm, now
        channel.send(bytes((PWM,)) + struct.pack(f'<H{len(pwm)}H', packet.frame_rate, *pwm))

    link = SitlLink(config.link, state, on_frame=on_frame, logger=logger,
                    sock=socket.socket(fileno=udp_fd))
    link.start()

    def update(settings: Any) -> None:
        link.settings, state.settings = settings

    warnings = RateLimitedLog(logger)
    checker = ConventionChecker(config.inputs.imu_mounting_rpy, config.inputs.odom_twist_frame,
                                LIVE_WINDOW)
    clock: Dict[str, Optional[float]] = {'on receipt': None}

    def on_imu(message: Any) -> None:
        stamp = stamp_seconds(message.header)
        observe_imu(checker, message, stamp)
        now = clock['on receipt']
        if now is not None:
            checker.add_clock(stamp, now)
            clock['on receipt'] = None

    observers = {IMU_TYPE: on_imu,
                 ODOMETRY_TYPE: lambda m: observe_odometry(checker, m, stamp_seconds(m.header))}
    routes = [serialized(route, observers[route.msgtype])
              if route.msgtype in SERIALIZED_DECODERS else route
              for route in input_routes(config, state)]
    conventions = LiveConventions(checker, logger)
    conventions.start()

    def decode(data: bytes) -> None:
        # No receive time: the serialized types all carry a header stamp.
        deliver(routes[data[1]], data[2:], 0.0, state, warnings)

    pushes = {SETTINGS: update, IMU: state.push_imu, ODOMETRY: state.push_odometry,
              WIND: state.push_wind, AIRSPEED: state.push_airspeed,
              BATTERY: state.push_battery, RC: state.push_rc,
              RANGE: lambda item: state.push_range(*item), REJECTED: state.count_rejected,
              CLOCK: lambda now: clock.__setitem__('on receipt', now)}
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
                if data[0] == SERIALIZED:
                    decode(data)
                else:
                    pushes[data[0]](pickle.loads(data[1:]))
            now = time.monotonic()
            if now >= next_stats:
                next_stats = now + STATS_PERIOD
                channel.send(bytes((STATS,)) + pickle.dumps(
                    (link.stats, list(state.meters.values()), conventions.latest),
                    pickle.HIGHEST_PROTOCOL))
    except OSError:
        return 0
    finally:
        conventions.stop()
        link.stop()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description='The SITL link, fed by a ROS node.')
    parser.add_argument('--udp-fd', type=int, required=True)
    parser.add_argument('--channel-fd', type=int, required=True)
    parser.add_argument('--parameters', required=True)
    args = parser.parse_args(argv)
    try:
        return serve_channel(json.loads(args.parameters), args.udp_fd, args.channel_fd)
    except KeyboardInterrupt:
        return 0


if __name__ == '__main__':
    os.environ.setdefault('PYTHONUNBUFFERED', '1')
    sys.exit(main())
