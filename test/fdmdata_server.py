"""
An FDMData simulator for tests, written from shared/spec/fdmdata.md.

Serves a scripted aircraft (a steady climb or a steady turn) on a data socket, records the
controls datagrams it receives, and can misbehave on demand: 0xFF error replies, short and
long replies, NaN values, silence.
"""

from dataclasses import dataclass
import math
import socket
import struct
import threading
import time
from typing import Dict, List, Optional, Tuple

EARTH_RADIUS = 6371000.0
GRAVITY = 9.80665


@dataclass(frozen=True)
class ScriptedFlight:
    """Level turn or straight climb in still air from a starting point, degrees and metres."""

    latitude: float = 37.6
    longitude: float = -122.4
    altitude: float = 100.0
    airspeed: float = 25.0
    climb: float = 0.0
    heading: float = 90.0
    turn_rate: float = 0.0
    roll: float = 0.0
    pitch: float = 0.0

    def at(self, t: float) -> Dict[str, float]:
        """Return the aircraft after t seconds (spherical Earth, exact for straight flight)."""
        heading = self.heading + self.turn_rate * t
        horizontal = math.sqrt(self.airspeed ** 2 - self.climb ** 2)
        if self.turn_rate:
            rate = math.radians(self.turn_rate)
            start = math.radians(self.heading)
            north = horizontal / rate * (math.sin(start + rate * t) - math.sin(start))
            east = -horizontal / rate * (math.cos(start + rate * t) - math.cos(start))
        else:
            north = horizontal * t * math.cos(math.radians(heading))
            east = horizontal * t * math.sin(math.radians(heading))
        latitude = self.latitude + math.degrees(north / EARTH_RADIUS)
        longitude = self.longitude + math.degrees(
            east / (EARTH_RADIUS * math.cos(math.radians(self.latitude))))
        roll, pitch = math.radians(self.roll), math.radians(self.pitch)
        yaw_rate = math.radians(self.turn_rate)
        return {
            'latitude': latitude, 'longitude': longitude,
            'altitude': self.altitude + self.climb * t, 'heading': heading % 360.0,
            'north': north, 'east': east,
            'accel': (GRAVITY * math.sin(pitch), -GRAVITY * math.sin(roll) * math.cos(pitch),
                      -GRAVITY * math.cos(roll) * math.cos(pitch)),
            'gyro': tuple(math.degrees(v) for v in (
                -yaw_rate * math.sin(pitch), yaw_rate * math.sin(roll) * math.cos(pitch),
                yaw_rate * math.cos(roll) * math.cos(pitch))),
        }


class FdmDataServer:
    """The simulator: data requests on one UDP port, controls on another, both on loopback."""

    def __init__(self, flight: ScriptedFlight) -> None:
        self.flight = flight
        self.data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.data.bind(('127.0.0.1', 0))
        self.controls = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.controls.bind(('127.0.0.1', 0))
        self.mode: Optional[str] = None      # None, 'error', 'short', 'long', 'nan', 'silent'
        self.mode_code: Optional[int] = None  # misbehave only for this request code
        self.requests: List[int] = []
        self.received_controls: List[Tuple[float, float, float, float]] = []
        self.start = time.monotonic()
        self._running = True
        self._threads = [threading.Thread(target=self._serve, daemon=True),
                         threading.Thread(target=self._listen_controls, daemon=True)]
        for thread in self._threads:
            thread.start()

    @property
    def data_port(self) -> int:
        return self.data.getsockname()[1]

    @property
    def controls_port(self) -> int:
        return self.controls.getsockname()[1]

    def values(self, code: int, t: float) -> Tuple[float, ...]:
        state = self.flight.at(t)
        flight = self.flight
        if code == 0x00:
            return (state['latitude'], state['longitude'], state['altitude'], flight.airspeed,
                    state['heading'])
        if code == 0x01:
            return state['accel']
        if code == 0x02:
            return state['gyro']
        if code == 0x03:
            return (0.0, 0.0, 0.0)
        if code == 0x04:
            return (288.15,)  # Kelvin, as Huginn's code returns
        if code == 0x05:
            return (101325.0 + 0.5 * 1.225 * flight.airspeed ** 2,)
        if code == 0x06:
            return (101325.0,)
        if code == 0x07:
            return (flight.climb, flight.roll, flight.pitch, state['heading'],
                    state['latitude'], state['longitude'], flight.airspeed, state['altitude'],
                    flight.turn_rate)
        raise KeyError(code)

    def _reply(self, request: bytes) -> Optional[bytes]:
        if len(request) != 1 or request[0] > 0x07:
            return b'\xff'
        code = request[0]
        values = self.values(code, time.monotonic() - self.start)
        mode = self.mode if self.mode_code in (None, code) else None
        if mode == 'silent':
            return None
        if mode == 'error':
            return b'\xff'
        if mode == 'nan':
            values = (math.nan,) + tuple(values[1:])
        reply = bytes([0, code]) + struct.pack(f'>{len(values)}f', *values)
        if mode == 'short':
            return reply[:-3]
        if mode == 'long':
            return reply + b'\0\0\0\0'
        return reply

    def _serve(self) -> None:
        while self._running:
            try:
                request, sender = self.data.recvfrom(64)
            except OSError:
                return
            self.requests.append(request[0] if request else -1)
            reply = self._reply(request)
            if reply is not None:
                self.data.sendto(reply, sender)

    def _listen_controls(self) -> None:
        while self._running:
            try:
                data = self.controls.recv(64)
            except OSError:
                return
            if len(data) == 16:
                self.received_controls.append(struct.unpack('>4f', data))

    def close(self) -> None:
        self._running = False
        self.data.close()
        self.controls.close()
