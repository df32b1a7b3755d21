"""
ArduPilot JSON SITL wire format: servo packets in, one JSON sensor line out.

SITL's reply parser is a substring search, not a JSON parser, so the encoder here writes the
reply by hand: compact separators, finite numbers only, 0/1 booleans and a key order in which
no key is found inside another (see shared/spec/json-sitl.md).
"""

from dataclasses import dataclass
import struct
from typing import List, Optional, Sequence, Tuple

from ardupilot_json_bridge.compiled._frame import decode_servo, format_mandatory

SERVO_MAGIC_16 = 18458
SERVO_MAGIC_32 = 29569
SERVO_PACKET_16 = struct.Struct('<HHI16H')
SERVO_PACKET_32 = struct.Struct('<HHI32H')
# Where both packets hold frame_count: after the magic and the frame rate.
FRAME_COUNT = struct.Struct('<I')
FRAME_COUNT_OFFSET = 4
LEGACY_2020_SIZE = 40
MAX_RANGEFINDERS = 6
MAX_RC_CHANNELS = 12
# SITL stores most values as float32: anything larger would read back as infinity.
FLOAT32_MAX = 3.4028234663852886e38

Vector3 = Tuple[float, float, float]
Quaternion = Tuple[float, float, float, float]


class ServoPacketError(ValueError):
    """A datagram that is not an ArduPilot servo packet; the message names the likely cause."""

    def __init__(self, message: str, data: bytes) -> None:
        super().__init__(message)
        self.size = len(data)


class ReplyError(ValueError):
    """A reply that must not be sent, because a mandatory value is missing or not finite."""


@dataclass(slots=True)
class ServoPacket:
    """
    One SITL physics frame: the servo outputs SITL wants applied for the next step.

    Per-frame objects are plain slotted dataclasses: a frozen one costs more to build than
    the rest of the frame's work, and nothing mutates them.
    """

    frame_rate: int
    frame_count: int
    pwm: Tuple[int, ...]

    @property
    def channel_count(self) -> int:
        return len(self.pwm)


def _describe(data: bytes) -> str:
    return f'{len(data)} bytes starting {bytes(data[:8]).hex(" ")}'


def decode_servo_packet(data: bytes) -> ServoPacket:
    """Decode a 16- or 32-channel servo packet, or raise ServoPacketError saying why not."""
    fields = decode_servo(data)  # the frame loop's own decoder (compiled/_frame.c)
    if fields is None:
        magic = int.from_bytes(data[:2], 'little') if len(data) >= 2 else None
        raise ServoPacketError(_rejection_reason(data, magic), data)
    return ServoPacket(*fields)


def _rejection_reason(data: bytes, magic: Optional[int]) -> str:
    size = len(data)
    if magic == SERVO_MAGIC_16:
        return (f'16-channel servo magic {SERVO_MAGIC_16} but {size} bytes instead of '
                f'{SERVO_PACKET_16.size}: truncated or padded packet ({_describe(data)})')
    if magic == SERVO_MAGIC_32:
        return (f'32-channel servo magic {SERVO_MAGIC_32} but {size} bytes instead of '
                f'{SERVO_PACKET_32.size}: SERVO_32_ENABLE mismatch or a truncated packet '
                f'({_describe(data)})')
    if data.lstrip()[:1] == b'{':
        return (f'received JSON text, not a servo packet ({_describe(data)}): another physics '
                'backend is sending its replies to this port, or SITL and the bridge both '
                'point at each other')
    if size == LEGACY_2020_SIZE:
        return (f'no servo magic in a 40-byte packet ({_describe(data)}): this looks like the '
                'unreleased 2020 JSON format (frame_count, speedup, pwm[16]); use a released '
                'ArduPilot (4.1 or newer)')
    return f'not an ArduPilot servo packet: unknown magic in {_describe(data)}'


def next_frame_datagram(data: bytes) -> Optional[bytes]:
    """
    Return the datagram SITL sends next if its PWM and frame rate stay as in data's packet.

    None where there is no such frame (frame_count would wrap: SITL restarts before then).
    """
    frame_count = FRAME_COUNT.unpack_from(data, FRAME_COUNT_OFFSET)[0]
    if frame_count >= 0xFFFFFFFF:
        return None
    return (data[:FRAME_COUNT_OFFSET] + FRAME_COUNT.pack(frame_count + 1)
            + data[FRAME_COUNT_OFFSET + FRAME_COUNT.size:])


def encode_servo_packet(frame_count: int, pwm: Sequence[int], frame_rate: int = 1200) -> bytes:
    """Build the packet SITL would send; used by test peers, benchmarks and tools."""
    if len(pwm) == 16:
        return SERVO_PACKET_16.pack(SERVO_MAGIC_16, frame_rate, frame_count, *pwm)
    if len(pwm) == 32:
        return SERVO_PACKET_32.pack(SERVO_MAGIC_32, frame_rate, frame_count, *pwm)
    raise ValueError(f'a servo packet has 16 or 32 channels, not {len(pwm)}')


@dataclass(slots=True)
class SensorReply:
    """
    Everything one reply tells SITL, in ArduPilot conventions (NED world, FRD body).

    Optional fields are None when absent; rangefinders and rc are positional (index 0 is
    rng_1 or rc_1) and may hold None for a channel with no value.
    """

    timestamp: float
    gyro: Vector3
    accel_body: Vector3
    position: Vector3
    velocity: Vector3
    quaternion: Quaternion
    rangefinders: Tuple[Optional[float], ...] = ()
    velocity_wind: Optional[Vector3] = None
    windvane: Optional[Tuple[float, float]] = None
    airspeed: Optional[float] = None
    battery: Optional[Tuple[float, float]] = None
    rc: Tuple[Optional[float], ...] = ()
    no_time_sync: bool = False
    no_lockstep: bool = False


def _finite(value: float) -> bool:
    return -FLOAT32_MAX <= value <= FLOAT32_MAX


def _number(value: float) -> str:
    return repr(float(value))


def _array(values: Sequence[float]) -> str:
    return '[' + ','.join([repr(float(v)) for v in values]) + ']'


# The mandatory keys, the SensorReply field that holds each, and how many numbers it takes.
# compiled/_frame.c writes them (format_mandatory), as the frame loop does: SITL keeps the
# timestamp and position as doubles (17 significant digits, which read back to the same
# double) and parses the rest into floats with sscanf's %f; those are rounded to float32 and
# written in 9 digits, which read back to exactly that float (format_number says how). SITL
# holds the values it held from every digit, except a value exactly halfway between two
# floats, which the cast rounds to even and a parse of every digit rounds up or down by its
# further digits: one float32 step.
MANDATORY_FIELDS = (('timestamp', 'timestamp', 1), ('imu.gyro', 'gyro', 3),
                    ('imu.accel_body', 'accel_body', 3), ('position', 'position', 3),
                    ('quaternion', 'quaternion', 4), ('velocity', 'velocity', 3))


def _mandatory(reply: SensorReply) -> str:
    try:
        gx, gy, gz = reply.gyro
        ax, ay, az = reply.accel_body
        px, py, pz = reply.position
        qw, qx, qy, qz = reply.quaternion
        vx, vy, vz = reply.velocity
        text = format_mandatory(reply.timestamp, gx, gy, gz, ax, ay, az, px, py, pz,
                                qw, qx, qy, qz, vx, vy, vz)
    except (ValueError, TypeError, OverflowError):  # no number, or not as many
        text = None
    if text is None:
        _refuse(reply)
    return text


def _refuse(reply: SensorReply) -> None:
    """Raise ReplyError saying which mandatory value cannot be sent."""
    for key, name, count in MANDATORY_FIELDS:
        field = getattr(reply, name)
        try:
            numbers = [_float(field)] if count == 1 else [_float(v) for v in field]
        except (TypeError, ValueError, OverflowError):
            raise ReplyError(f'{key} is not {count} number(s): {field!r}') from None
        if len(numbers) != count:
            raise ReplyError(f'{key} is not {count} number(s): {field!r}')
        if not all(map(_finite, numbers)):
            raise ReplyError(f'{key} is not finite: {field!r}')
    if not _float(reply.timestamp) >= 0.0:
        raise ReplyError(f'timestamp is not a finite physics time: {reply.timestamp!r}')
    raise ReplyError(f'the reply cannot be written: {reply!r}')


def _float(value: object) -> float:
    """Return a number as a float; text is no number here, though float() would read it."""
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f'text, not a number: {value!r}')
    return float(value)  # type: ignore[arg-type]


def encode_reply(reply: SensorReply) -> Tuple[bytes, Tuple[str, ...]]:
    """
    Encode one reply datagram; also return the optional keys left out, each with why.

    A key is left out when its value is not finite, or when its name begins with the name of
    an absent key (rc_10 when rc_1 is absent), which SITL's substring search would misread.

    Raises ReplyError when a mandatory value is not finite: such a frame gets no reply.
    """
    mandatory = _mandatory(reply)
    if (not reply.rangefinders and not reply.rc and reply.velocity_wind is None
            and reply.windvane is None and reply.airspeed is None and reply.battery is None
            and not reply.no_time_sync and not reply.no_lockstep):
        return (mandatory + '}\n').encode('ascii'), ()  # most frames: nothing optional
    parts = [mandatory]
    dropped = []
    for index, distance in enumerate(reply.rangefinders[:MAX_RANGEFINDERS], start=1):
        if distance is None:
            continue
        if _finite(distance):
            parts.append(f',"rng_{index}":{_number(distance)}')
        else:
            dropped.append(f'rng_{index}')
    optional = (('velocity_wind', reply.velocity_wind, None),
                ('windvane', reply.windvane, ('direction', 'speed')),
                ('airspeed', reply.airspeed, None),
                ('battery', reply.battery, ('voltage', 'current')))
    for key, value, names in optional:
        if value is None:
            continue
        values = value if isinstance(value, tuple) else (value,)
        if not all(map(_finite, values)):
            dropped.append(key)
        elif names:
            parts.append(f',"{key}":{{' + ','.join(
                f'"{name}":{_number(v)}' for name, v in zip(names, values)) + '}')
        else:
            parts.append(f',"{key}":' + (_array(values) if isinstance(value, tuple)
                                         else _number(value)))
    rc_items: List[str] = []
    absent: List[str] = []
    for index, pwm in enumerate(reply.rc[:MAX_RC_CHANNELS], start=1):
        key = f'rc_{index}'
        # SITL finds a key by substring search: with rc_1 absent it would read rc_10 as rc_1.
        shadowed = next((name for name in absent if key.startswith(name)), None)
        if pwm is None or not _finite(pwm) or shadowed:
            absent.append(key)
            if shadowed:
                dropped.append(f'{key} (SITL would read it as the absent {shadowed})')
            elif pwm is not None:
                dropped.append(key)
            continue
        rc_items.append(f'"{key}":{_number(pwm)}')
    if rc_items:
        parts.append(',"rc":{' + ','.join(rc_items) + '}')
    if reply.no_time_sync:
        parts.append(',"no_time_sync":1')
    if reply.no_lockstep:
        parts.append(',"no_lockstep":1')
    parts.append('}\n')
    return ''.join(parts).encode('ascii'), tuple(dropped)
