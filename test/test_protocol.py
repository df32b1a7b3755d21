"""Servo packet decoding and reply encoding, against the rules of shared/spec/json-sitl.md."""

import ctypes
import ctypes.util
from dataclasses import replace
import json
import math
import struct

import numpy as np
import pytest

from ardupilot_json_bridge.core.protocol import (
    decode_servo_packet, encode_reply, encode_servo_packet, next_frame_datagram, ReplyError,
    SensorReply, SERVO_MAGIC_16, SERVO_MAGIC_32, ServoPacketError)
from sitl_peer import parse_reply

FULL_REPLY = SensorReply(
    timestamp=12.345, gyro=(0.1, -0.2, 0.3), accel_body=(0.5, -0.25, -9.80665),
    position=(10.0, -20.0, -5.5), velocity=(1.5, -2.5, 0.125),
    quaternion=(0.9238795325112867, 0.0, 0.0, 0.3826834323650898),
    rangefinders=(1.25, None, 3.5, 4.0, 5.0, 6.5), velocity_wind=(3.0, -1.0, 0.0),
    windvane=(0.75, 4.5), airspeed=17.25, battery=(12.6, 3.2),
    rc=tuple(1000.0 + 50 * i for i in range(12)), no_time_sync=True, no_lockstep=True)


@pytest.mark.parametrize('channels,magic', [(16, SERVO_MAGIC_16), (32, SERVO_MAGIC_32)])
def test_decodes_servo_packets(channels, magic):
    pwm = [1000 + i for i in range(channels)]
    packet = decode_servo_packet(encode_servo_packet(4242, pwm, frame_rate=1200))
    assert packet.frame_count == 4242
    assert packet.frame_rate == 1200
    assert packet.pwm == tuple(pwm)
    assert packet.channel_count == channels
    assert encode_servo_packet(1, pwm)[:2] == struct.pack('<H', magic)


def test_pwm_zero_is_kept_as_no_output():
    pwm = [0] * 16
    pwm[2] = 1500
    assert decode_servo_packet(encode_servo_packet(0, pwm)).pwm[:4] == (0, 0, 1500, 0)


@pytest.mark.parametrize('data,cause', [
    (encode_servo_packet(1, [1500] * 16)[:39], 'truncated'),
    (encode_servo_packet(1, [1500] * 16) + b'\0' * 32, 'instead of 40'),
    (struct.pack('<HHI16H', SERVO_MAGIC_32, 1200, 1, *[1500] * 16), 'SERVO_32_ENABLE'),
    (struct.pack('<If16H', 7, 1.0, *[1500] * 16), 'unreleased 2020'),
    (b'\n{"timestamp":1.0}\n', 'JSON text'),
    (b'', 'not an ArduPilot servo packet'),
    (b'\x01', 'not an ArduPilot servo packet'),
    (b'hello world, this is not a servo packet', 'unknown magic'),
])
def test_rejects_what_is_not_a_servo_packet_and_says_why(data, cause):
    with pytest.raises(ServoPacketError) as error:
        decode_servo_packet(data)
    assert cause in str(error.value)
    assert error.value.size == len(data)
    assert str(len(data)) in str(error.value)


def test_reply_is_framed_compact_one_line_json():
    data, dropped = encode_reply(FULL_REPLY)
    text = data.decode('ascii')
    assert dropped == ()
    assert text.startswith('\n{') and text.endswith('}\n')
    assert text.count('\n') == 2
    assert ': ' not in text and ', ' not in text and ' ' not in text
    document = json.loads(text)
    # Written as the float32 SITL stores (numpy's rounding), in as many digits as it needs.
    stored = np.float32((0.5, -0.25, -9.80665))
    assert list(np.float32(document['imu']['accel_body'])) == list(stored)
    assert document['position'] == [10.0, -20.0, -5.5]
    assert document['no_time_sync'] == 1 and document['no_lockstep'] == 1
    assert 'true' not in text and 'false' not in text


def sitl_parser():
    """Return C's strtof and strtod (SITL's sscanf %f and atof), or skip without a C library."""
    name = ctypes.util.find_library('c')
    if name is None:
        pytest.skip('no C library to read numbers as SITL does')
    libc = ctypes.CDLL(name)
    for function, kind in ((libc.strtof, ctypes.c_float), (libc.strtod, ctypes.c_double)):
        function.restype = kind
        function.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]
    return (lambda token: libc.strtof(token.encode(), None),
            lambda token: libc.strtod(token.encode(), None))


def spread_values(count: int) -> list:
    """Values over every magnitude a float32 holds, signed, with the awkward ones."""
    rng = np.random.default_rng(21)
    values = rng.uniform(-1.0, 1.0, count) * 10.0 ** rng.uniform(-44.0, 38.0, count)
    return [0.0, -0.0, 0.1, 9.80665, -9.80665, 1e-45, 1.4e-45, 1e-40, 3.4028234663852886e38,
            -3.4e38, 1e9, 123456789.0, 0.7071067811865476, 1.0 - 1e-12] + values.tolist()


def written_reply(values: list) -> tuple:
    """Return the reply of 17 values in its order, and its JSON with each number as text."""
    reply = SensorReply(timestamp=abs(values[0]), gyro=tuple(values[1:4]),
                        accel_body=tuple(values[4:7]), position=tuple(values[7:10]),
                        quaternion=tuple(values[10:14]), velocity=tuple(values[14:17]))
    return reply, json.loads(encode_reply(reply)[0], parse_float=str, parse_int=str)


def test_sitl_stores_the_same_values_as_from_every_digit():
    strtof, strtod = sitl_parser()
    values = spread_values(4000)
    float_fields = ('gyro', 'accel_body', 'velocity')
    for start in range(0, len(values) - 16, 17):
        reply, document = written_reply(values[start:start + 17])
        sent = {name: getattr(reply, name) for name in float_fields + ('quaternion',)}
        written = dict(document['imu'], velocity=document['velocity'],
                       quaternion=document['quaternion'])
        for name, numbers in sent.items():
            # Bit for bit, -0.0 included: what SITL's sscanf made of repr's every digit (no
            # value here is exactly halfway between two floats: see the next test).
            assert [struct.pack('<f', strtof(token)) for token in written[name]] == [
                struct.pack('<f', strtof(repr(value))) for value in numbers], (name, numbers)
        assert [strtod(token) for token in document['position']] == list(reply.position)
        assert strtod(document['timestamp']) == reply.timestamp


def number_edges() -> list:
    """Values at the edges of the digits and of printf's notations, both signs (float32's too)."""
    powers = [float(f'1e{n}') for n in range(-323, 39)]
    floats = [np.float32(power) for power in powers if 1e-45 <= power <= 1e38]
    named = [0.0, 9.9999999e-5, 999999999.5, 99999999999999999.0, 5e-324,
             2.2250738585072014e-308, 1.1754943508222875e-38, 1.4e-45, 3.4028234663852886e38,
             0.1, 1.0 / 3.0]
    edges = powers + named + [
        float(np.nextafter(power, toward)) for power in powers for toward in (0.0, np.inf)] + [
        float(np.nextafter(power, np.float32(toward))) for power in floats
        for toward in (0.0, np.inf)]
    edges = [value for value in edges if abs(value) <= 3.4028234663852886e38]
    return edges + [-value for value in edges]


def assert_read_back(values: list) -> None:
    """Assert that a reply of 17 values reads back as SITL reads it, in printf's notation."""
    strtof, strtod = sitl_parser()
    _, document = written_reply(values)
    doubles = [document['timestamp'], *document['position']]
    sent = [abs(values[0]), *values[7:10]]
    assert [struct.pack('<d', strtod(token)) for token in doubles] == [
        struct.pack('<d', value) for value in sent], (doubles, sent)
    floats = [*document['imu']['gyro'], *document['imu']['accel_body'],
              *document['quaternion'], *document['velocity']]
    stored = [np.float32(value) for value in values[1:7] + values[10:17]]
    assert [struct.pack('<f', strtof(token)) for token in floats] == [
        struct.pack('<f', value) for value in stored], (floats, stored)
    # The last digit may differ from printf's at a near-tie; the notation may not.
    printed = ['%.17g' % value for value in sent] + ['%.9g' % value for value in stored]
    assert [token.partition('e')[1:] for token in doubles + floats] == [
        text.partition('e')[1:] for text in printed]


def test_an_edge_reads_back_bit_for_bit_as_a_double_and_as_a_float():
    # Each value in every field: 17 digits of the double, 9 of its float32.
    for edge in number_edges():
        assert_read_back([edge] * 17)


def test_any_double_and_float_reads_back_bit_for_bit():
    # Random bit patterns of doubles (every exponent, denormals too) and of float32s, as
    # strtod and strtof read them: the double itself, and the float32 numpy rounds it to.
    rng = np.random.default_rng(32)
    doubles = rng.integers(0, 2 ** 63, 12000, dtype=np.uint64).view(np.float64)
    floats = rng.integers(0, 2 ** 31, 12000, dtype=np.uint32).view(np.float32)
    values = np.concatenate([doubles, floats[np.isfinite(floats)].astype(float)])
    values = values[np.abs(values) <= 3.4028234663852886e38]
    signs = np.where(rng.integers(0, 2, values.size) == 1, -1.0, 1.0)
    values = [float(value) for value in values * signs]
    values += [0.0] * (-len(values) % 17)
    for start in range(0, len(values), 17):
        assert_read_back(values[start:start + 17])


def test_a_value_halfway_between_two_floats_is_stored_one_step_from_every_digit_at_most():
    # SITL's parse of repr's digits rounds a halfway value by the digits past the double it
    # names; the float32 cast rounds it to the even neighbour. Halfway values from numpy.
    strtof, _ = sitl_parser()
    lows = np.array([1.0, 0.1, 9.80665, -0.7071067811865476, 3.0e-30, 12345.678], np.float32)
    highs = np.nextafter(lows, np.float32(np.inf))
    for low, high in zip(lows, highs):
        halfway = (float(low) + float(high)) / 2  # exact in a double
        assert float(low) < halfway < float(high)
        reply = replace(FULL_REPLY, gyro=(halfway, 0.0, 0.0))
        (token, _, _) = json.loads(encode_reply(reply)[0], parse_float=str,
                                   parse_int=str)['imu']['gyro']
        stored = strtof(token)
        assert stored == float(np.float32(halfway)), (halfway, token)
        assert stored in (float(low), float(high))
        assert strtof(repr(halfway)) in (float(low), float(high))
    # By hand: 1 + 2**-24 lies halfway between 1 and 1 + 2**-23; its repr, 1.0000000596046448,
    # lies just above it, so every digit reads 1 + 2**-23 where the cast gives the even 1.
    assert repr(1 + 2 ** -24) == '1.0000000596046448'
    assert strtof('1.0000000596046448') == 1 + 2 ** -23
    gyro = json.loads(encode_reply(replace(FULL_REPLY, gyro=(1 + 2 ** -24, 0.0, 0.0)))[0],
                      parse_float=str, parse_int=str)['imu']['gyro']
    assert strtof(gyro[0]) == 1.0


def test_reply_key_order_is_substring_safe():
    text = encode_reply(FULL_REPLY)[0].decode()
    assert text.index('"velocity"') < text.index('"velocity_wind"')
    assert text.index('"rc_9"') < text.index('"rc_10"')
    assert text.index('"windvane"') < text.index('"airspeed"')
    keys = ['timestamp', 'imu', 'gyro', 'accel_body', 'position', 'quaternion', 'velocity',
            'rng_1', 'rng_3', 'rng_4', 'rng_5', 'rng_6', 'velocity_wind', 'windvane',
            'direction', 'speed', 'airspeed', 'battery', 'voltage', 'current', 'rc',
            'no_time_sync', 'no_lockstep'] + [f'rc_{i}' for i in range(1, 13)]
    found = set()
    json.loads(text, object_pairs_hook=lambda pairs: found.update(k for k, _ in pairs))
    assert found == set(keys)


@pytest.mark.parametrize('dialect', ['4.6', '4.7'])
def test_every_key_reads_back_as_sent(dialect):
    parsed = parse_reply(encode_reply(FULL_REPLY)[0], dialect)
    reply = FULL_REPLY
    assert parsed['timestamp'] == reply.timestamp
    assert parsed['imu.gyro'] == pytest.approx(reply.gyro)
    assert parsed['imu.accel_body'] == pytest.approx(reply.accel_body)
    assert parsed['position'] == pytest.approx(reply.position)
    assert parsed['velocity'] == pytest.approx(reply.velocity)
    assert parsed['quaternion'] == pytest.approx(reply.quaternion)
    for index, distance in enumerate(reply.rangefinders, start=1):
        if distance is None:
            assert f'rng_{index}' not in parsed
        else:
            assert parsed[f'rng_{index}'] == distance
    assert parsed['velocity_wind'] == pytest.approx(reply.velocity_wind)
    assert (parsed['windvane.direction'], parsed['windvane.speed']) == reply.windvane
    assert parsed['airspeed'] == reply.airspeed
    assert (parsed['battery.voltage'], parsed['battery.current']) == reply.battery
    assert [parsed[f'rc.rc_{i}'] for i in range(1, 13)] == list(reply.rc)
    assert parsed['no_time_sync'] is True
    assert parsed['no_lockstep'] is True


def test_minimal_reply_has_only_mandatory_keys():
    reply = SensorReply(0.0, (0, 0, 0), (0, 0, -9.80665), (0, 0, 0), (0, 0, 0), (1, 0, 0, 0))
    parsed = parse_reply(encode_reply(reply)[0])
    assert set(parsed) == {'timestamp', 'imu.gyro', 'imu.accel_body', 'position', 'velocity',
                           'quaternion'}


@pytest.mark.parametrize('field,value', [
    ('gyro', (math.nan, 0.0, 0.0)), ('accel_body', (0.0, math.inf, 0.0)),
    ('position', (0.0, 0.0, -math.inf)), ('velocity', (1e39, 0.0, 0.0)),
    ('quaternion', (math.nan, 0.0, 0.0, 0.0)), ('timestamp', math.nan),
    ('timestamp', -1.0), ('timestamp', 10 ** 400), ('gyro', None), ('position', (0.0, 'up', 0.0)),
    ('quaternion', (1.0, 0.0, 0.0)), ('velocity', (0.0, 0.0, 0.0, 0.0)),
    ('position', (1e39, 0.0, 0.0)), ('gyro', (3.5e38, 0.0, 0.0)), ('timestamp', '5.0'),
    ('position', (0.0, '1e3', 0.0)), ('gyro', '123'),
])
def test_a_mandatory_value_that_is_no_finite_number_means_no_reply(field, value):
    reply = replace(FULL_REPLY, **{field: value})
    with pytest.raises(ReplyError, match=field):
        encode_reply(reply)


def test_fields_of_the_wrong_size_mean_no_reply_though_the_numbers_add_up():
    reply = replace(FULL_REPLY, gyro=(0.0, 0.0, 0.0, 0.0), accel_body=(0.0, -9.8))
    with pytest.raises(ReplyError, match='imu.gyro is not 3 number'):
        encode_reply(reply)


def test_non_finite_optional_values_are_left_out():
    reply = replace(FULL_REPLY, rangefinders=(math.inf, 2.0),
                    velocity_wind=(math.nan, 0.0, 0.0), airspeed=math.inf,
                    battery=(math.nan, 1.0), windvane=(0.0, 1e40), rc=(1500.0, math.nan))
    data, dropped = encode_reply(reply)
    assert set(dropped) == {'rng_1', 'velocity_wind', 'airspeed', 'battery', 'windvane', 'rc_2'}
    parsed = parse_reply(data)
    assert parsed['rng_2'] == 2.0 and 'rng_1' not in parsed
    assert parsed['rc.rc_1'] == 1500.0 and 'rc.rc_2' not in parsed
    for key in ('velocity_wind', 'airspeed', 'battery.voltage', 'windvane.speed'):
        assert key not in parsed
    assert 'nan' not in data.decode().lower() and 'inf' not in data.decode().lower()


def omitting(key: str, how: object) -> SensorReply:
    """FULL_REPLY (every rangefinder set) with one optional key absent: None or not finite."""
    reply = replace(FULL_REPLY, rangefinders=(1.25, 2.5, 3.5, 4.0, 5.0, 6.5))
    if key.startswith(('rng_', 'rc_')):
        field = 'rangefinders' if key.startswith('rng_') else 'rc'
        values = list(getattr(reply, field))
        values[int(key.split('_')[1]) - 1] = how
        return replace(reply, **{field: tuple(values)})
    size = {'velocity_wind': 3, 'windvane': 2, 'airspeed': 1, 'battery': 2}[key]
    value = None if how is None else (how if size == 1 else (how,) * size)
    return replace(reply, **{key: value})


OPTIONAL_KEYS = ([f'rng_{i}' for i in range(1, 7)]
                 + ['velocity_wind', 'windvane', 'airspeed', 'battery']
                 + [f'rc_{i}' for i in range(1, 13)])


@pytest.mark.parametrize('how', [None, math.nan], ids=['none', 'nan'])
@pytest.mark.parametrize('key', OPTIONAL_KEYS)
def test_sitl_reads_every_other_key_right_when_one_is_left_out(key, how):
    reply = omitting(key, how)
    data, dropped = encode_reply(reply)
    parsed = parse_reply(data)   # as SITL reads it: substring search, key by key
    # What SITL must see: every present value as given; the left-out key and any key whose
    # name begins with it (rc_10..rc_12 behind rc_1) absent, never read as another's value.
    shadowed = [k for k in OPTIONAL_KEYS if k != key and k.startswith(key)]
    for index, distance in enumerate(reply.rangefinders, start=1):
        name = f'rng_{index}'
        assert parsed.get(name) == (None if name == key else distance)
    for index, pwm in enumerate(reply.rc, start=1):
        name = f'rc_{index}'
        assert parsed.get(f'rc.{name}') == (None if name in [key] + shadowed else pwm)
    expected = {'velocity_wind': reply.velocity_wind, 'airspeed': reply.airspeed}
    for name, value in expected.items():
        if name == key:
            assert name not in parsed
        else:
            assert parsed[name] == pytest.approx(value)
    for name, parts in (('windvane', ('direction', 'speed')),
                        ('battery', ('voltage', 'current'))):
        values = tuple(parsed.get(f'{name}.{part}') for part in parts)
        assert values == ((None, None) if name == key else getattr(reply, name))
    assert all(any(d.startswith(k) for k in shadowed) for d in dropped if '(' in d)
    assert len([d for d in dropped if '(' in d]) == len(shadowed)


@pytest.mark.parametrize('channels', [16, 32])
def test_the_next_frame_datagram_is_the_packet_sitl_sends_next_with_the_same_pwm(channels):
    pwm = [1000 + 37 * k for k in range(channels)]
    for frame_count in (0, 1, 65535, 2 ** 31):
        assert next_frame_datagram(encode_servo_packet(frame_count, pwm, 400)) == \
            encode_servo_packet(frame_count + 1, pwm, 400)
    assert next_frame_datagram(encode_servo_packet(2 ** 32 - 1, pwm)) is None
