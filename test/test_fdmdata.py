"""FDMData: the protocol, the conversion, and the whole loop against a test simulator."""

import logging
import math
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from ardupilot_json_bridge.core.frames import quaternion_to_euler
from ardupilot_json_bridge.core.protocol import ServoPacket
from ardupilot_json_bridge.core.state import SensorState, StateSettings
from ardupilot_json_bridge.sources.fdmdata import (
    decode_controls, decode_reply, encode_controls, encode_reply, FdmDataError, Request)
from ardupilot_json_bridge.sources.fdmdata_source import (
    FdmDataConverter, FdmDataSettings, FdmDataSource, FdmReading, GeodeticOrigin,
    parse_channels, pitot_airspeed)
from conftest import free_udp_port, reaped
from fdmdata_server import FdmDataServer, ScriptedFlight
from sitl_peer import SitlPeer

CLIMB = ScriptedFlight(airspeed=25.0, climb=2.0, heading=0.0,
                       pitch=math.degrees(math.asin(2.0 / 25.0)))
TURN = ScriptedFlight(airspeed=20.0, heading=90.0, turn_rate=6.0, roll=20.0)


@pytest.mark.parametrize('data,message', [
    (b'\xff', 'answered 0xFF'),
    (bytes([0, 0x01]) + struct.pack('>2f', 1, 2), '10-byte reply, expected 14'),
    (bytes([0, 0x01]) + struct.pack('>4f', 1, 2, 3, 4), '18-byte reply, expected 14'),
    (bytes([0, 0x02]) + struct.pack('>3f', 1, 2, 3), 'echoes code 0x02'),
    (bytes([1, 0x01]) + struct.pack('>3f', 1, 2, 3), 'status 0x01'),
    (bytes([0, 0x01]) + struct.pack('>3f', 1, math.nan, 3), 'non-finite'),
])
def test_bad_replies_are_named(data, message):
    with pytest.raises(FdmDataError, match=message) as error:
        decode_reply(data, Request.ACCELEROMETER)
    assert 'accelerometer request 0x01' in str(error.value)


def test_reply_round_trip_is_big_endian_float32():
    data = encode_reply(Request.GPS, (37.5, -122.25, 100.0, 25.0, 90.0))
    assert data[:2] == b'\x00\x00' and data[2:6] == struct.pack('>f', 37.5)
    assert decode_reply(data, Request.GPS) == (37.5, -122.25, 100.0, 25.0, 90.0)


def test_controls_are_clamped_in_order():
    assert decode_controls(encode_controls(-2.0, 0.5, 1.5, -0.25)) == (-1.0, 0.5, 1.0, 0.0)


def test_geodetic_origin_scale():
    origin = GeodeticOrigin(45.0, 10.0, 50.0)
    north, east, down = origin.ned(45.001, 10.001, 60.0)
    assert north == pytest.approx(111.13, abs=0.05)
    assert east == pytest.approx(78.85, abs=0.05)
    assert down == -10.0


def test_pitot_airspeed_kelvin_or_celsius():
    static = 101325.0
    pitot = static + 0.5 * 1.225 * 30.0 ** 2
    assert pitot_airspeed(pitot, static, 288.15) == pytest.approx(30.0, rel=1e-3)
    assert pitot_airspeed(pitot, static, 15.0) == pytest.approx(30.0, rel=1e-3)
    assert pitot_airspeed(static - 5.0, static, 288.15) == 0.0


@pytest.mark.parametrize('temperature, kelvin',
                         [(0.0, 273.15), (273.15, 273.15), (-20.0, 253.15), (None, 288.15)])
def test_pitot_airspeed_at_the_thermometers_temperature(temperature, kelvin):
    # 30 m/s through air at kelvin: dynamic pressure 0.5 rho v^2, rho = p / (287.05 J/kg/K T).
    # No thermometer: the standard sea-level 15 degC.
    static = 101325.0
    pitot = static + 0.5 * static / (287.05 * kelvin) * 30.0 ** 2
    level = reading(CLIMB, 0.0, float32=False)
    with_pitot = FdmReading(gps=level.gps, accel=level.accel, gyro=level.gyro, ins=level.ins,
                            pitot=pitot, static=static, temperature=temperature)
    converter = FdmDataConverter(FdmDataSettings(host='x', pitot=True))
    _, _, airspeed = converter.convert(with_pitot, 0.0)
    assert airspeed.value == pytest.approx(30.0, rel=1e-9)


def test_parse_channels():
    assert parse_channels('1,2,4,3') == (1, 2, 4, 3)
    with pytest.raises(ValueError, match='four SERVO numbers'):
        parse_channels('1,2,3')


def reading(flight, t, float32=True):
    server = FdmDataServer.__new__(FdmDataServer)
    server.flight = flight

    def value(code):
        values = server.values(code, t)
        if float32:
            values = struct.unpack(f'>{len(values)}f', struct.pack(f'>{len(values)}f', *values))
        return values
    return FdmReading(gps=value(0), accel=value(1), gyro=value(2), ins=value(7))


def test_conversion_of_a_steady_turn():
    converter = FdmDataConverter(FdmDataSettings(host='x'))
    imu, odometry, airspeed = converter.convert(reading(TURN, 0.0, float32=False), 0.0)
    assert odometry.position == pytest.approx((0.0, 0.0, 0.0))
    assert odometry.velocity == pytest.approx((0.0, 20.0, 0.0), abs=1e-9)
    roll, pitch, yaw = quaternion_to_euler(odometry.quaternion)
    assert (math.degrees(roll), math.degrees(pitch), math.degrees(yaw)) == pytest.approx(
        (20.0, 0.0, 90.0))
    assert imu.gyro == pytest.approx(np.radians(TURN.at(0.0)['gyro']))
    assert imu.gyro[2] == pytest.approx(math.radians(6.0) * math.cos(math.radians(20.0)))
    assert imu.accel == pytest.approx(TURN.at(0.0)['accel'])
    assert airspeed.value == 20.0


def test_float32_fixes_are_smoothed():
    raw = FdmDataConverter(FdmDataSettings(host='x', smoothing=0.0))
    smooth = FdmDataConverter(FdmDataSettings(host='x', smoothing=1.0))
    raw_errors, smooth_errors = [], []
    for step in range(400):
        t = step * 0.01
        truth = CLIMB.at(t)['north']
        raw_errors.append(raw.convert(reading(CLIMB, t), t)[1].position[0] - truth)
        smooth_errors.append(smooth.convert(reading(CLIMB, t), t)[1].position[0] - truth)
    raw_steps = np.abs(np.diff(raw_errors)).max()
    smooth_steps = np.abs(np.diff(smooth_errors[100:])).max()
    assert raw_steps > 0.2
    assert smooth_steps < raw_steps / 4
    assert abs(smooth_errors[-1]) < 0.6


def test_velocity_from_fixes():
    converter = FdmDataConverter(FdmDataSettings(host='x', velocity='fixes', smoothing=0.0))
    for step in range(200):
        velocity = converter.convert(reading(CLIMB, step * 0.01), step * 0.01)[1].velocity
    assert velocity == pytest.approx((math.sqrt(25.0 ** 2 - 4.0), 0.0, -2.0), abs=0.5)


@pytest.fixture
def server():
    simulator = FdmDataServer(CLIMB)
    yield simulator
    simulator.close()


def source_for(server, **settings):
    state = SensorState(StateSettings())
    return FdmDataSource(FdmDataSettings(host='127.0.0.1', data_port=server.data_port,
                                         controls_port=server.controls_port, **settings),
                         state)


@pytest.mark.parametrize('mode,message', [
    ('silent', 'no answer within 50 ms (simulator silent?)'),
    ('error', 'answered 0xFF'),
    ('short', 'reply, expected'),
    ('long', 'reply, expected'),
    ('nan', 'non-finite'),
])
def test_simulator_faults_are_survived_and_said(server, caplog, mode, message):
    source = source_for(server)
    try:
        assert source.poll_once()
        server.mode, server.mode_code = mode, 0x07
        with caplog.at_level(logging.WARNING):
            assert not source.poll_once()
        assert message in caplog.text and 'inertial navigation request 0x07' in caplog.text
        assert 'no sample this poll' in caplog.text
        assert source.state.meters['imu'].count == 1
        server.mode = None
        time.sleep(0.06)
        assert source.poll_once()
        assert source.state.meters['imu'].count == 2
    finally:
        source.stop()


def test_pitot_requests(server):
    source = source_for(server, pitot=True)
    try:
        assert source.poll_once()
        assert set(server.requests) == {0, 1, 2, 4, 5, 6, 7}
    finally:
        source.stop()


def test_controls_mapping_and_order(server):
    source = source_for(server)
    try:
        pwm = (1000, 2000, 1750, 1250) + (0,) * 12
        assert source.on_frame(ServoPacket(400, 1, pwm)) is None
        source.on_frame(ServoPacket(400, 2, (0,) * 16))
        deadline = time.monotonic() + 2.0
        while len(server.received_controls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.received_controls == [pytest.approx((-1.0, 1.0, -0.5, 0.75))] * 2
    finally:
        source.stop()


def run_command(server, port, *extra):
    return subprocess.Popen(
        [sys.executable, '-m', 'ardupilot_json_bridge.cli', 'fdmdata', '--host', '127.0.0.1',
         '--data-port', str(server.data_port), '--controls-port', str(server.controls_port),
         '--port', str(port), '--rate', '100', *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize('flight', [CLIMB, TURN], ids=['climb', 'turn'])
def test_the_loop_end_to_end(flight, caplog, patient_config):
    simulator = FdmDataServer(flight)
    port = free_udp_port()
    peer = SitlPeer(port)
    pwm = [1000, 2000, 1750, 1250] + [0] * 12
    with reaped(run_command(simulator, port, '--config', patient_config)) as process:
        try:
            replies = peer.lock_step(1800, pwm)
        finally:
            peer.close()
            process.terminate()
            output, errors = process.communicate(timeout=10)
            simulator.close()
    assert len(replies) == 1800, errors
    # A 100 Hz simulator, served on SITL's 1200 Hz grid: every step one frame period.
    timestamps = [r['timestamp'] for r in replies]
    assert timestamps[0] == 0.0
    assert all(b - a == pytest.approx(1 / 1200, abs=1e-9)
               for a, b in zip(timestamps, timestamps[1:]))
    horizontal = math.sqrt(flight.airspeed ** 2 - flight.climb ** 2)
    # Replies start when SITL first asks, not at the simulator's time 0: headings and
    # distances are measured from the first reply.
    first = replies[0]
    first_yaw = quaternion_to_euler(first['quaternion'])[2]
    for reply in replies[-240:]:
        roll, pitch, yaw = (math.degrees(a) for a in quaternion_to_euler(reply['quaternion']))
        heading = first_yaw + math.radians(flight.turn_rate * reply['timestamp'])
        assert (roll, pitch) == pytest.approx((flight.roll, flight.pitch), abs=0.01)
        assert math.remainder(math.radians(yaw) - heading, math.tau) == pytest.approx(
            0.0, abs=math.radians(1.0))
        assert reply['velocity'][2] == pytest.approx(-flight.climb, abs=1e-5)
        assert math.hypot(*reply['velocity'][:2]) == pytest.approx(horizontal, rel=1e-5)
        assert reply['airspeed'] == pytest.approx(flight.airspeed)
        assert reply['imu.accel_body'][2] < -9.0
    last = replies[-1]
    travelled = math.hypot(last['position'][0] - first['position'][0],
                           last['position'][1] - first['position'][1])
    chord = horizontal * last['timestamp']
    assert travelled == pytest.approx(chord, rel=0.15, abs=1.0)
    assert last['position'][2] - first['position'][2] == pytest.approx(
        -flight.climb * last['timestamp'], abs=0.5)
    assert simulator.received_controls
    assert simulator.received_controls[-1] == pytest.approx((-1.0, 1.0, -0.5, 0.75))


def test_silent_simulator_means_no_reply_and_a_clear_log():
    simulator = FdmDataServer(CLIMB)
    simulator.mode = 'silent'
    port = free_udp_port()
    peer = SitlPeer(port)
    with reaped(run_command(simulator, port)) as process:
        try:
            assert peer.lock_step(1, [1500] * 16, timeout=1.5) == []
        finally:
            peer.close()
            process.terminate()
            _, errors = process.communicate(timeout=10)
            simulator.close()
    assert 'no answer within 50 ms (simulator silent?)' in errors
    assert 'no reply to SITL frame 0' in errors
