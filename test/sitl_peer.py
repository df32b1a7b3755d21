"""
A SITL stand-in for tests: sends servo packets and reads replies as ArduPilot does.

ArduPilot's JSON backend (libraries/SITL/SIM_JSON.cpp) does not parse JSON: for every entry of
its key table it finds the section, then the key, with strstr, steps past the key and two more
characters, and reads a number there with atof/strtoull or a vector with sscanf. The parser here
does the same, in the two dialects replies must satisfy:
- '4.6': vectors by sscanf("[%f, %f, %f]"), which needs '[' right after the colon;
- '4.7': tolerant arrays, which skip white space around brackets and commas.
Both then apply the strict checks the upstream proposal adds: framing, finite values only.
"""

import math
import re
import socket
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ardupilot_json_bridge.core.protocol import encode_servo_packet

DOUBLE, FLOAT, VECTOR3, QUATERNION, BOOLEAN = 'double', 'float', 'vector3', 'quaternion', 'bool'

# (section, key, type, required), in the order of ArduPilot's key table.
KEY_TABLE: List[Tuple[str, str, str, bool]] = [
    ('', 'timestamp', DOUBLE, True),
    ('imu', 'gyro', VECTOR3, True),
    ('imu', 'accel_body', VECTOR3, True),
    ('', 'position', VECTOR3, True),
    ('', 'attitude', VECTOR3, False),
    ('', 'quaternion', QUATERNION, False),
    ('', 'velocity', VECTOR3, True),
] + [('', f'rng_{i}', FLOAT, False) for i in range(1, 7)] + [
    ('', 'velocity_wind', VECTOR3, False),
    ('windvane', 'direction', FLOAT, False),
    ('windvane', 'speed', FLOAT, False),
    ('', 'airspeed', FLOAT, False),
    ('', 'no_time_sync', BOOLEAN, False),
    ('', 'no_lockstep', BOOLEAN, False),
] + [('rc', f'rc_{i}', FLOAT, False) for i in range(1, 13)] + [
    ('battery', 'voltage', FLOAT, False),
    ('battery', 'current', FLOAT, False),
]

# What C's strtod accepts as a number prefix (after leading white space).
C_FLOAT = re.compile(
    r'\s*([+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan))', re.IGNORECASE)
C_INT = re.compile(r'\s*([+-]?\d+)')


class SitlRejected(ValueError):
    """SITL would not accept this reply (or would accept wrong values); says what it prints."""


def _strtod(text: str) -> Optional[Tuple[float, int]]:
    match = C_FLOAT.match(text)
    if not match:
        return None
    return float(match.group(1)), match.end()


def _atof(text: str) -> float:
    parsed = _strtod(text)
    return 0.0 if parsed is None else parsed[0]


def _sscanf_vector(text: str, count: int) -> Optional[Tuple[float, ...]]:
    """sscanf(text, "[%f, %f, %f]"): '[' must come first; ',' right after each number."""
    if not text.startswith('['):
        return None
    pos, values = 1, []
    for index in range(count):
        parsed = _strtod(text[pos:])
        if parsed is None:
            return None
        values.append(parsed[0])
        pos += parsed[1]
        if index < count - 1:
            if text[pos:pos + 1] != ',':
                return None
            pos += 1
    return tuple(values)


def _tolerant_vector(text: str, count: int) -> Optional[Tuple[float, ...]]:
    """Return the 4.7 reading: white space allowed around '[', ',' and ']'."""
    text = text.lstrip()
    if not text.startswith('['):
        return None
    pos, values = 1, []
    for index in range(count):
        parsed = _strtod(text[pos:])
        if parsed is None:
            return None
        values.append(parsed[0])
        pos += parsed[1]
        rest = text[pos:]
        stripped = rest.lstrip()
        pos += len(rest) - len(stripped)
        expected = ',' if index < count - 1 else ']'
        if text[pos:pos + 1] != expected:
            return None
        pos += 1
    return tuple(values)


def parse_reply(datagram: bytes, dialect: str = '4.6') -> Dict[str, object]:
    """
    Read one reply datagram as SITL would; raise SitlRejected where SITL would not take it.

    Returns {'section.key' or 'key': value} for every key found.
    """
    text = datagram.decode('ascii')
    if not (text.startswith('\n') and text.endswith('\n')):
        raise SitlRejected('reply not framed as "\\n" + json + "\\n": SITL drops it')
    line = text[1:-1]
    if '\n' in line:
        raise SitlRejected('newline inside the reply: SITL reads only its last line')
    vector = _sscanf_vector if dialect == '4.6' else _tolerant_vector
    found: Dict[str, object] = {}
    for section, key, kind, required in KEY_TABLE:
        name = f'{section}.{key}' if section else key
        start = line.find(section)
        if start < 0:
            if required:
                raise SitlRejected(f'Failed to find {section}')
            continue
        start += len(section) + 1
        at = line.find(key, start)
        if at < 0:
            if required:
                raise SitlRejected(f'Failed to find key {section}/{key}')
            continue
        rest = line[at + len(key) + 2:]
        if kind in (VECTOR3, QUATERNION):
            value = vector(rest, 4 if kind == QUATERNION else 3)
            if value is None:
                raise SitlRejected(f'Failed to parse vector for {section}/{key}')
        elif kind == BOOLEAN:
            match = C_INT.match(rest)
            value = bool(match and int(match.group(1)))
        else:
            value = _atof(rest)
        if not all(math.isfinite(v) for v in (value if isinstance(value, tuple) else (value,))):
            raise SitlRejected(f'non-finite value for {name}: {value}')
        found[name] = value
    if 'quaternion' not in found and 'attitude' not in found:
        raise SitlRejected('Did not receive attitude or quaternion')
    return found


class SitlFrameRate:
    """
    SITL's frame rate as SIM_JSON.cpp keeps it from the timestamps it is sent.

    recv_fdm: a step of more than 0 and less than 0.1 s sets the rate to 1 / step; update():
    the rate then moves at most 1 Hz per frame towards SIM_RATE_HZ. Servo packets carry the rate
    as an integer (uint16 frame_rate), so a bridge that follows it hears its own steps back.
    """

    def __init__(self, sim_rate_hz: float = 1200.0) -> None:
        self.sim_rate_hz = sim_rate_hz
        self.rate_hz = sim_rate_hz
        self.last_timestamp = 0.0
        self.lowest = sim_rate_hz

    @property
    def frame_rate(self) -> int:
        return int(self.rate_hz)

    def accept(self, timestamp: float) -> None:
        """Take one reply's timestamp, as SITL does."""
        step = max(0.0, timestamp - self.last_timestamp)
        if 0.0 < step < 0.1:
            self.rate_hz = 1.0 / step
        self.last_timestamp = timestamp
        self.rate_hz = min(max(self.sim_rate_hz, self.rate_hz - 1.0), self.rate_hz + 1.0)
        self.lowest = min(self.lowest, self.rate_hz)


class SitlPeer:
    """
    A UDP client that speaks to the bridge as SITL instance does, from its own port.

    With a SitlFrameRate, its packets carry the frame rate SITL would derive from the replies
    stepped so far; without, always 1200.
    """

    def __init__(self, port: int, host: str = '127.0.0.1', channels: int = 16,
                 clock: Optional[SitlFrameRate] = None) -> None:
        self.target = (host, port)
        self.channels = channels
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.frame_count = 0
        self.clock = clock

    @property
    def address(self) -> Tuple[str, int]:
        return self.sock.getsockname()[:2]

    def send(self, frame_count: Optional[int] = None,
             pwm: Optional[Sequence[int]] = None) -> None:
        count = self.frame_count if frame_count is None else frame_count
        values = list(pwm) if pwm is not None else [1000] * self.channels
        rate = self.clock.frame_rate if self.clock else 1200
        self.sock.sendto(encode_servo_packet(count, values, rate), self.target)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendto(data, self.target)

    def receive(self, timeout: float = 2.0) -> Optional[bytes]:
        """
        Return the next reply datagram, or None when none comes within timeout.

        Datagrams from any address but the bridge's are ignored: another test's SITL peer on
        this machine may aim at a port it picked that this peer now holds.
        """
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(0.0, deadline - time.monotonic()) or 1e-6)
            try:
                data, sender = self.sock.recvfrom(65536)
            except socket.timeout:
                return None
            if sender[:2] == self.target:
                return data

    def step(self, pwm: Optional[Sequence[int]] = None, timeout: float = 2.0,
             dialect: str = '4.6') -> Dict[str, object]:
        """One lock-step frame: send, read and parse the reply, then advance frame_count."""
        self.send(pwm=pwm)
        datagram = self.receive(timeout)
        if datagram is None:
            raise TimeoutError(f'no reply to frame {self.frame_count}')
        parsed = parse_reply(datagram, dialect)
        self.frame_count += 1
        if self.clock:
            self.clock.accept(parsed['timestamp'])
        return parsed

    def lock_step(self, count: int, pwm: Optional[Sequence[int]] = None, timeout: float = 5.0,
                  wait: float = 0.3) -> List[Dict[str, object]]:
        """
        Step frames until count replies came or timeout passed; return the parsed replies.

        A frame with no reply within wait is sent again, as SITL resends. The bridge answers
        a resent frame it already answered with the same reply again; that late copy (the
        previous reply's timestamp) moves SITL's clock by nothing, and is not the new frame's.
        """
        replies: List[Dict[str, object]] = []
        deadline = time.monotonic() + timeout
        while len(replies) < count and time.monotonic() < deadline:
            self.send(pwm=pwm)
            until = time.monotonic() + wait
            while True:
                datagram = self.receive(max(0.0, until - time.monotonic()))
                if datagram is None:
                    break
                reply = parse_reply(datagram)
                if replies and reply['timestamp'] == replies[-1]['timestamp']:
                    continue
                replies.append(reply)
                self.frame_count += 1
                if self.clock:
                    self.clock.accept(reply['timestamp'])
                break
        return replies

    def close(self) -> None:
        self.sock.close()
