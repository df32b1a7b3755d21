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


# SIM_JSON.cpp recv_fdm: it waits UDP_TIMEOUT_MS (100 ms) a receive and resends its servo
# packet once the waits add up to more than 1000 ms: every 11th wait, 1.1 s.
RESEND_INTERVAL = 1.1


class SecondReply(AssertionError):
    """A datagram SITL would read as a frame's reply that answered another frame."""


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
    A UDP client that speaks to the bridge as a SITL instance does, from its own port.

    It reads one datagram a frame, and resends a frame every RESEND_INTERVAL without one.

    With a SitlFrameRate, its packets carry the frame rate SITL would derive from the replies
    stepped so far; without, always rate (1200 unless set). It sends from source (by default
    the bridge's own address: the same host), as SITL on another host sends from its own.
    """

    def __init__(self, port: int, host: str = '127.0.0.1', channels: int = 16,
                 clock: Optional[SitlFrameRate] = None, source: Optional[str] = None) -> None:
        self.target = (host, port)
        self.channels = channels
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((source or host, 0))
        self.frame_count = 0
        self.clock = clock
        self.resends = 0
        self.last_timestamp: Optional[float] = None
        self.rate = 1200   # the frame rate sent without a SitlFrameRate

    @property
    def address(self) -> Tuple[str, int]:
        return self.sock.getsockname()[:2]

    def send(self, frame_count: Optional[int] = None,
             pwm: Optional[Sequence[int]] = None) -> None:
        count = self.frame_count if frame_count is None else frame_count
        values = list(pwm) if pwm is not None else [1000] * self.channels
        rate = self.clock.frame_rate if self.clock else self.rate
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
        """One lock-step frame: send, read ONE datagram as its reply, advance frame_count."""
        self._check_nothing_queued()
        self.send(pwm=pwm)
        datagram = self.receive(timeout)
        if datagram is None:
            raise TimeoutError(f'no reply to frame {self.frame_count}')
        return self._take(datagram, dialect)

    def lock_step(self, count: int, pwm: Optional[Sequence[int]] = None,
                  timeout: float = 5.0) -> List[Dict[str, object]]:
        """
        Step frames as SITL does until count replies came or timeout passed; return them.

        Each frame's reply is the first datagram read after sending it, whatever it holds
        (SIM_JSON.cpp recv_fdm reads one datagram a frame). A frame with no reply is sent
        again every RESEND_INTERVAL, as SITL resends. A reply that cannot be the frame's
        raises SecondReply (see _take).
        """
        replies: List[Dict[str, object]] = []
        deadline = time.monotonic() + timeout
        while len(replies) < count and time.monotonic() < deadline:
            self._check_nothing_queued()
            self.send(pwm=pwm)
            while True:
                left = deadline - time.monotonic()
                datagram = self.receive(max(0.0, min(RESEND_INTERVAL, left)))
                if datagram is not None:
                    replies.append(self._take(datagram))
                    break
                if left <= RESEND_INTERVAL:
                    return replies
                self.resends += 1
                self.send(pwm=pwm)
        return replies

    def _check_nothing_queued(self) -> None:
        """Raise SecondReply if a datagram came before the frame about to be sent."""
        self.sock.setblocking(False)
        try:
            data, sender = self.sock.recvfrom(65536)
        except BlockingIOError:
            return
        finally:
            self.sock.setblocking(True)
        if sender[:2] == self.target:
            raise SecondReply(f'a reply was waiting before frame {self.frame_count} was sent: '
                              'a second reply to an earlier frame, which SITL would read as '
                              f"this frame's ({data[:60]!r})")

    def _take(self, datagram: bytes, dialect: str = '4.6') -> Dict[str, object]:
        """
        Take datagram as the reply to the frame sent, as SITL does, and advance frame_count.

        Raises SecondReply where its timestamp is not after the last reply's in the session
        (from frame 0): every new frame moves the bridge's clock, so such a reply answered
        an earlier frame, and SITL would read every reply after it one frame late.
        """
        parsed = parse_reply(datagram, dialect)
        timestamp = parsed['timestamp']
        if self.frame_count == 0:
            self.last_timestamp = None
        last = self.last_timestamp
        if last is not None and timestamp <= last:
            raise SecondReply(f'the reply to frame {self.frame_count} repeats time {timestamp} '
                              f'(last reply {last}): a second reply to an earlier frame')
        self.last_timestamp = timestamp
        self.frame_count += 1
        if self.clock:
            self.clock.accept(timestamp)
        return parsed

    def close(self) -> None:
        self.sock.close()
