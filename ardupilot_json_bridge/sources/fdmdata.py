"""
Huginn's FDMData protocol: one-byte sensor requests, big-endian float32 replies, controls.

A request is the request code; a reply is status (0 ok), the echoed code, then the values. A
malformed or unknown request is answered with the single byte 0xFF. Controls are aileron,
elevator, rudder (-1..1) and throttle (0..1) as four big-endian float32 (shared/spec/fdmdata.md).
"""

import enum
import math
import struct
from typing import Tuple

DATA_PORT = 10300
CONTROLS_PORT = 10301
ERROR_REPLY = b'\xff'
CONTROLS = struct.Struct('>4f')


class Request(enum.IntEnum):
    """Request codes and, below, how many float32 values each reply carries."""

    GPS = 0x00
    ACCELEROMETER = 0x01
    GYROSCOPE = 0x02
    MAGNETOMETER = 0x03
    THERMOMETER = 0x04
    PITOT = 0x05
    STATIC_PRESSURE = 0x06
    INERTIAL_NAVIGATION = 0x07


VALUE_COUNTS = {
    Request.GPS: 5, Request.ACCELEROMETER: 3, Request.GYROSCOPE: 3, Request.MAGNETOMETER: 3,
    Request.THERMOMETER: 1, Request.PITOT: 1, Request.STATIC_PRESSURE: 1,
    Request.INERTIAL_NAVIGATION: 9,
}
NAMES = {
    Request.GPS: 'GPS', Request.ACCELEROMETER: 'accelerometer', Request.GYROSCOPE: 'gyroscope',
    Request.MAGNETOMETER: 'magnetometer', Request.THERMOMETER: 'thermometer',
    Request.PITOT: 'pitot tube', Request.STATIC_PRESSURE: 'static pressure',
    Request.INERTIAL_NAVIGATION: 'inertial navigation',
}


class FdmDataError(ValueError):
    """A reply that cannot be used; the message names the request and what was wrong."""


def encode_request(request: Request) -> bytes:
    return bytes([request])


def reply_size(request: Request) -> int:
    return 2 + 4 * VALUE_COUNTS[request]


def describe(request: Request) -> str:
    return f'{NAMES[request]} request 0x{int(request):02x}'


def decode_reply(data: bytes, request: Request) -> Tuple[float, ...]:
    """Return the values of a reply to request, or FdmDataError saying why there are none."""
    if data == ERROR_REPLY:
        raise FdmDataError(f'{describe(request)}: the simulator answered 0xFF (error: '
                           'unknown or malformed request)')
    expected = reply_size(request)
    if len(data) != expected:
        raise FdmDataError(f'{describe(request)}: {len(data)}-byte reply, expected '
                           f'{expected} (status, code, {VALUE_COUNTS[request]} float32)')
    if data[1] != request:
        raise FdmDataError(f'{describe(request)}: reply echoes code 0x{data[1]:02x} '
                           '(a late reply to an earlier request?)')
    if data[0] != 0:
        raise FdmDataError(f'{describe(request)}: status 0x{data[0]:02x}, not ok')
    values = struct.unpack(f'>{VALUE_COUNTS[request]}f', data[2:])
    if not all(map(math.isfinite, values)):
        raise FdmDataError(f'{describe(request)}: non-finite values {values}')
    return values


def encode_reply(request: Request, values: Tuple[float, ...], status: int = 0) -> bytes:
    """Encode a simulator's reply (test servers and tools)."""
    return bytes([status, request]) + struct.pack(f'>{len(values)}f', *values)


def encode_controls(aileron: float, elevator: float, rudder: float, throttle: float) -> bytes:
    """Return the 16-byte controls datagram, each value clamped to its range."""
    def clamp(value: float, low: float) -> float:
        return max(low, min(1.0, value))
    return CONTROLS.pack(clamp(aileron, -1.0), clamp(elevator, -1.0), clamp(rudder, -1.0),
                         clamp(throttle, 0.0))


def decode_controls(data: bytes) -> Tuple[float, float, float, float]:
    """aileron, elevator, rudder, throttle of a controls datagram."""
    if len(data) != CONTROLS.size:
        raise FdmDataError(f'controls datagram of {len(data)} bytes, expected {CONTROLS.size}')
    return CONTROLS.unpack(data)
