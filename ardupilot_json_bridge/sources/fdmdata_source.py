"""
An FDMData flight simulator as the physics source: polled sensors in, controls out.

The protocol carries no time, so samples are stamped with a monotonic clock since the first
poll. Positions arrive as float32 latitude and longitude, about 0.4 m apart at mid latitudes:
a complementary filter blends them with the velocity so SITL does not see 0.4 m steps.
"""

from dataclasses import dataclass
import logging
import math
import socket
import threading
import time
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from ardupilot_json_bridge.config import ConfigError
from ardupilot_json_bridge.core.frames import euler_to_quaternion
from ardupilot_json_bridge.core.protocol import ServoPacket
from ardupilot_json_bridge.core.pwm import ActuatorMapper, ChannelScaling, OutputGroup, OutputKind
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.samples import AirspeedSample, ImuSample, OdometrySample
from ardupilot_json_bridge.core.state import SensorState
from ardupilot_json_bridge.sources.fdmdata import (
    decode_reply, describe, encode_controls, encode_request, FdmDataError, reply_size,
    Request)

WGS84_A = 6378137.0
WGS84_E2 = 6.69437999014e-3
GAS_CONSTANT_AIR = 287.05
KELVIN_THRESHOLD = 150.0
# Air temperature (K) when the simulator has no thermometer: the standard atmosphere's at sea
# level.
STANDARD_TEMPERATURE = 288.15
AIRDATA, FIXES = 'airdata', 'fixes'
FIX_WINDOW = 1.0
SURFACE = ChannelScaling(multiplier=2.0, offset=-0.5)
# The output group of aileron, elevator, rudder and throttle.
CONTROLS = 'controls'


@dataclass(frozen=True)
class FdmDataSettings:
    """
    Where the simulator is, how often to poll it and how to read and drive it.

    channels: SERVO channels of aileron, elevator, rudder and throttle (ArduPlane's SERVO1,
    SERVO2, SERVO4, SERVO3); PWM servo_min..servo_max maps to -1..1 (surfaces), 0..1
    (throttle).
    """

    host: str
    data_port: int = 10300
    controls_port: int = 10301
    rate: float = 100.0
    timeout: float = 0.05
    pitot: bool = False
    velocity: str = AIRDATA
    smoothing: float = 1.0
    channels: Tuple[int, int, int, int] = (1, 2, 4, 3)
    servo_min: float = 1000.0
    servo_max: float = 2000.0

    def scalings(self) -> Tuple[ChannelScaling, ...]:
        """Aileron, elevator, rudder, throttle scalings for the configured PWM range."""
        surface = ChannelScaling(self.servo_min, self.servo_max, SURFACE.multiplier,
                                 SURFACE.offset)
        throttle = ChannelScaling(self.servo_min, self.servo_max)
        return surface, surface, surface, throttle


@dataclass(frozen=True)
class FdmReading:
    """One poll's replies, values as the protocol gives them."""

    gps: Tuple[float, ...]
    accel: Tuple[float, ...]
    gyro: Tuple[float, ...]
    ins: Tuple[float, ...]
    pitot: Optional[float] = None
    static: Optional[float] = None
    temperature: Optional[float] = None


class GeodeticOrigin:
    """Latitude, longitude, altitude to NED metres about a first fix (local tangent plane)."""

    def __init__(self, latitude: float, longitude: float, altitude: float) -> None:
        self.latitude, self.longitude, self.altitude = latitude, longitude, altitude
        sin_lat = math.sin(math.radians(latitude))
        denominator = 1.0 - WGS84_E2 * sin_lat * sin_lat
        self.meridian = WGS84_A * (1.0 - WGS84_E2) / denominator ** 1.5
        self.normal = WGS84_A / math.sqrt(denominator) * math.cos(math.radians(latitude))

    def ned(self, latitude: float, longitude: float, altitude: float) -> np.ndarray:
        return np.array([math.radians(latitude - self.latitude) * self.meridian,
                         math.radians(longitude - self.longitude) * self.normal,
                         self.altitude - altitude])


def pitot_airspeed(pitot: float, static: float, temperature: float) -> float:
    """Airspeed from pitot and static pressure (Pa); temperature in K, or C below 150."""
    kelvin = temperature if temperature > KELVIN_THRESHOLD else temperature + 273.15
    density = static / (GAS_CONSTANT_AIR * kelvin)
    return math.sqrt(2.0 * max(pitot - static, 0.0) / density)


class FdmDataConverter:
    """Readings to samples: units, NED about the first fix, smoothed position, velocity."""

    def __init__(self, settings: FdmDataSettings) -> None:
        self.settings = settings
        self.origin: Optional[GeodeticOrigin] = None
        self._position: Optional[np.ndarray] = None
        self._stamp: Optional[float] = None
        self._fixes: List[Tuple[float, np.ndarray]] = []

    def convert(self, reading: FdmReading,
                stamp: float) -> Tuple[ImuSample, OdometrySample, AirspeedSample]:
        latitude, longitude, altitude = reading.gps[:3]
        if self.origin is None:
            self.origin = GeodeticOrigin(latitude, longitude, altitude)
        fix = self.origin.ned(latitude, longitude, altitude)
        climb, roll, pitch, heading, _, _, ins_airspeed, _, _ = reading.ins
        velocity = (self._velocity_from_fixes(stamp, fix) if self.settings.velocity == FIXES
                    else self._velocity_from_airdata(ins_airspeed, climb, heading))
        position = self._smooth(stamp, fix, velocity)
        quaternion = euler_to_quaternion(*np.radians([roll, pitch, heading]))
        gyro = tuple(math.radians(v) for v in reading.gyro)
        airspeed = ins_airspeed
        if reading.pitot is not None and reading.static is not None:
            temperature = reading.temperature  # 0 is a temperature (0 degC), not a missing one
            airspeed = pitot_airspeed(reading.pitot, reading.static, STANDARD_TEMPERATURE
                                      if temperature is None else temperature)
        return (ImuSample(stamp, gyro, tuple(reading.accel)),
                OdometrySample(stamp, tuple(float(v) for v in position),
                               tuple(float(v) for v in velocity),
                               tuple(float(v) for v in quaternion), gyro),
                AirspeedSample(stamp, airspeed))

    @staticmethod
    def _velocity_from_airdata(airspeed: float, climb: float, heading: float) -> np.ndarray:
        """Air-relative velocity: exact in still air, which is all the protocol can tell."""
        horizontal = math.sqrt(max(airspeed * airspeed - climb * climb, 0.0))
        course = math.radians(heading)
        return np.array([horizontal * math.cos(course), horizontal * math.sin(course), -climb])

    def _velocity_from_fixes(self, stamp: float, fix: np.ndarray) -> np.ndarray:
        """Least-squares slope of the fixes of the last FIX_WINDOW seconds."""
        self._fixes.append((stamp, fix))
        self._fixes = [(t, p) for t, p in self._fixes if stamp - t <= FIX_WINDOW]
        if len(self._fixes) < 2:
            return np.zeros(3)
        times = np.array([t for t, _ in self._fixes])
        points = np.array([p for _, p in self._fixes])
        centred = times - times.mean()
        spread = float(centred @ centred)
        return np.zeros(3) if spread <= 0.0 else centred @ (points - points.mean(0)) / spread

    def _smooth(self, stamp: float, fix: np.ndarray, velocity: np.ndarray) -> np.ndarray:
        tau = self.settings.smoothing
        if self._position is None or tau <= 0.0:
            self._position = fix
        else:
            dt = max(stamp - self._stamp, 0.0)
            predicted = self._position + velocity * dt
            self._position = predicted + (dt / (tau + dt)) * (fix - predicted)
        self._stamp = stamp
        return self._position


def resolve_host(host: str) -> str:
    """Return the IPv4 address of the simulator's host, or raise ConfigError naming it."""
    try:
        return socket.gethostbyname(host)
    except (OSError, UnicodeError) as error:
        reason = getattr(error, 'strerror', None) or str(error)
        raise ConfigError(f'--host {host!r}: no IPv4 address ({reason})') from None


class FdmDataSource:
    """Polls the simulator at settings.rate in a thread and pushes samples into the state."""

    def __init__(self, settings: FdmDataSettings, state: SensorState,
                 logger: Optional[logging.Logger] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.state = state
        self.logger = logger or logging.getLogger('ardupilot_json_bridge.fdmdata')
        self.warnings = RateLimitedLog(self.logger)
        self.converter = FdmDataConverter(settings)
        self.mapper = ActuatorMapper([OutputGroup(
            CONTROLS, OutputKind.FLOAT64_MULTI_ARRAY, CONTROLS, settings.channels,
            settings.scalings())])
        self._clock = clock
        self._start: Optional[float] = None
        address = resolve_host(settings.host)
        self._data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._data.connect((address, settings.data_port))
        self._controls = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._controls_target = (address, settings.controls_port)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._requests = [Request.GPS, Request.ACCELEROMETER, Request.GYROSCOPE,
                          Request.INERTIAL_NAVIGATION]
        if settings.pitot:
            self._requests += [Request.PITOT, Request.STATIC_PRESSURE, Request.THERMOMETER]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name='fdmdata')
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self._data.close()
        self._controls.close()

    def _run(self) -> None:
        period = 1.0 / self.settings.rate
        next_poll = self._clock()
        while not self._stop.is_set():
            self.poll_once()
            next_poll = max(next_poll + period, self._clock())
            if self._stop.wait(max(0.0, next_poll - self._clock())):
                return

    def poll_once(self) -> bool:
        """Request every sensor once; push the samples only if every reply was good."""
        replies = {}
        for request in self._requests:
            try:
                replies[request] = self._request(request)
            except (FdmDataError, OSError) as error:
                self._failed(request, str(error))
                return False
        now = self._clock()
        if self._start is None:
            self._start = now
        reading = FdmReading(
            gps=replies[Request.GPS], accel=replies[Request.ACCELEROMETER],
            gyro=replies[Request.GYROSCOPE], ins=replies[Request.INERTIAL_NAVIGATION],
            pitot=replies.get(Request.PITOT, (None,))[0],
            static=replies.get(Request.STATIC_PRESSURE, (None,))[0],
            temperature=replies.get(Request.THERMOMETER, (None,))[0])
        imu, odometry, airspeed = self.converter.convert(reading, now - self._start)
        self.state.push_odometry(odometry)
        self.state.push_airspeed(airspeed)
        self.state.push_imu(imu)
        return True

    def _failed(self, request: Request, reason: str) -> None:
        self.warnings.warning(f'fdmdata:{int(request)}', f'FDMData simulator at '
                              f'{self.settings.host}:{self.settings.data_port}: {reason}; '
                              'no sample this poll, so SITL gets no reply rather than stale '
                              'data')

    def _request(self, request: Request) -> Tuple[float, ...]:
        deadline = self._clock() + self.settings.timeout
        self._data.send(encode_request(request))
        while True:
            remaining = deadline - self._clock()
            if remaining <= 0.0:
                raise FdmDataError(f'{describe(request)}: no answer within '
                                   f'{self.settings.timeout * 1e3:.0f} ms (simulator silent?)')
            self._data.settimeout(remaining)
            try:
                data = self._data.recv(reply_size(request) + 64)
            except socket.timeout:
                continue
            except ConnectionRefusedError:
                raise FdmDataError(f'{describe(request)}: nothing listens on '
                                   f'{self.settings.host}:{self.settings.data_port}') from None
            if len(data) >= 2 and data[1] != request and data != b'\xff':
                continue
            return decode_reply(data, request)

    def on_frame(self, packet: ServoPacket) -> None:
        """
        Map one frame's PWM to aileron, elevator, rudder, throttle and send them.

        The link's on_frame: the state answers the frame, with the simulator's next FDMData.
        """
        values = self.mapper.apply(packet.pwm)[CONTROLS]
        try:
            self._controls.sendto(encode_controls(*values), self._controls_target)
        except OSError as error:
            self.warnings.warning('fdmdata:controls', f'sending controls to '
                                  f'{self._controls_target[0]}:{self._controls_target[1]} '
                                  f'failed: {error}')


def parse_channels(text: str) -> Tuple[int, int, int, int]:
    """'1,2,4,3' -> SERVO channels of aileron, elevator, rudder, throttle."""
    parts = [p.strip() for p in text.split(',')]
    if len(parts) != 4 or not all(p.isdigit() and 1 <= int(p) <= 32 for p in parts):
        raise ValueError(f'--channels takes four SERVO numbers (aileron, elevator, rudder, '
                         f'throttle), 1 to 32: {text!r}')
    return tuple(int(p) for p in parts)


def servo_channels_description(channels: Sequence[int]) -> str:
    names = ('aileron', 'elevator', 'rudder', 'throttle')
    return ', '.join(f'{name} SERVO{channel}' for name, channel in zip(names, channels))
