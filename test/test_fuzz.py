"""Fuzzing: no datagram crashes the link; no message value makes a non-finite reply."""

import collections
import dataclasses
import glob
import logging
import math
import os
import socket
import struct
import threading

from hypothesis import example, given, settings, strategies as st
import yaml

from ardupilot_json_bridge.config import (
    config_from_parameters, ConfigError, load_parameters_file, NODE_NAME, OUTPUT_SETTINGS,
    PARAMETER_DEFAULTS)
from ardupilot_json_bridge.core.protocol import (
    decode_servo_packet, encode_reply, encode_servo_packet, next_frame_datagram, ReplyError,
    ServoPacketError)
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.reply import build_reply
from ardupilot_json_bridge.core.samples import ImuSample, OdometrySample
from ardupilot_json_bridge.core.settings import StateSettings
from ardupilot_json_bridge.core.state import Instant, SensorState
from ardupilot_json_bridge.messages.cdr_writer import CLOCK_TYPE
from ardupilot_json_bridge.messages.routes import deliver, IMU_TYPE, input_routes, ODOMETRY_TYPE
from ardupilot_json_bridge.sources.bagfile import write_bag
import ros_messages as msgs
from sitl_peer import parse_reply

STORE = msgs.STORES['jazzy']
# Examples per property below: a few seconds in CI; FUZZ_EXAMPLES=20000 tries harder by hand.
FUZZ_EXAMPLES = int(os.environ.get('FUZZ_EXAMPLES', '200'))
nasty = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e308, -1e308, 3.5e38, 1e-308, float('nan'), float('inf')]))
# Mostly ordinary values (one draw in twenty is nasty), so that a third of the examples, with
# their twenty values, make a reply and the parsers run on it.
value = st.integers(0, 19).flatmap(lambda i: nasty if i == 7 else st.floats(-1e3, 1e3))
vec3 = st.tuples(value, value, value)
quat = st.tuples(value, value, value, value)
datagrams = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda n, pwm: encode_servo_packet(n, pwm), st.integers(0, 2**32 - 1),
              st.lists(st.integers(0, 65535), min_size=16, max_size=16)),
    st.builds(lambda n, pwm, cut: encode_servo_packet(n, pwm)[:cut],
              st.integers(0, 2**32 - 1),
              st.lists(st.integers(0, 65535), min_size=32, max_size=32),
              st.integers(0, 71)))


@settings(max_examples=300, deadline=None)
@given(st.lists(datagrams, min_size=1, max_size=5))
def check_datagrams(packets):
    link = check_datagrams.link
    before = link.stats.received
    for data in packets:
        link.handle_datagram(data, check_datagrams.sitl.getsockname())
    assert link.stats.received == before + len(packets)


def test_arbitrary_datagrams_never_crash_the_link(make_link):
    quiet = logging.getLogger('fuzz.link')
    quiet.setLevel(logging.CRITICAL)
    # Physics a second ahead of any instant, so every valid packet takes the reply path.
    link = make_link(StateSettings(horizon=1.0), fresh_timeout=0.001, logger=quiet)
    level = (1.0, 0.0, 0.0, 0.0)
    link.state.push_odometry(OdometrySample(1.0, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), level,
                                            (0.0, 0.0, 0.0)))
    link.state.push_imu(ImuSample(1.0, (0.0, 0.0, 0.0), (0.0, 0.0, -9.8)))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sitl:
        sitl.bind(('127.0.0.1', 0))
        check_datagrams.link, check_datagrams.sitl = link, sitl
        check_datagrams()
    stats = link.stats
    assert stats.rejected > 0 and stats.replied > 0, stats.summary()


CONFIG = config_from_parameters({
    'rangefinder_1_topic': 'range', 'rangefinder_2_topic': 'scan',
    'rangefinder_2_type': 'laser_scan', 'wind_topic': 'wind', 'airspeed_topic': 'airspeed',
    'battery_topic': 'battery', 'rc_topic': 'joy'})


OUTCOMES = {'replied': 0, 'refused': 0, 'unavailable': 0}


@settings(max_examples=400, deadline=None)
@example(position=(0.0, 0.0, 0.0), orientation=(0.0, 0.0, 0.0, 1.0), linear=(0.0, 0.0, 0.0),
         angular=(0.0, 0.0, 0.0), gyro=(1e308, 0.0, 0.0), accel=(0.0, 0.0, 9.8), distance=1.0,
         scan=[], wind=(0.0, 0.0, 0.0), airspeed=1.0, voltage=1.0, current=1.0, axes=[],
         dt=0.001)
@given(position=vec3, orientation=quat, linear=vec3, angular=vec3, gyro=vec3, accel=vec3,
       distance=value, scan=st.lists(value, max_size=5), wind=vec3, airspeed=value,
       voltage=value, current=value, axes=st.lists(value, max_size=4),
       dt=st.one_of(st.floats(-0.2, 0.2), nasty))
def check_message_values(position, orientation, linear, angular, gyro, accel, distance, scan,
                         wind, airspeed, voltage, current, axes, dt):
    state = SensorState(CONFIG.state)
    log = RateLimitedLog(logging.getLogger('fuzz'))
    routes = {route.name: route for route in input_routes(CONFIG, state)}
    stamp = 100.0
    imu_stamp = stamp + (dt if abs(dt) < 1.0 else 0.0)
    messages = {
        'odometry': msgs.odometry(STORE, stamp, position, orientation, linear, angular),
        'imu': msgs.imu(STORE, imu_stamp, gyro, accel),
        'rangefinder_1': msgs.range_message(STORE, stamp, distance),
        'rangefinder_2': msgs.laser_scan(STORE, stamp, scan),
        'wind': msgs.wind(STORE, stamp, wind),
        'airspeed': msgs.float64(STORE, airspeed),
        'battery': msgs.battery(STORE, stamp, voltage, current),
        'rc': msgs.joy(STORE, stamp, axes, [1]),
    }
    for name, message in messages.items():
        deliver(routes[name], message, stamp, state, log)
    instant = state.wait_for_stamp(state.newest_primary() or 0.0, 0.0)
    if not isinstance(instant, Instant):
        OUTCOMES['unavailable'] += 1
        return
    try:
        data, _ = encode_reply(build_reply(instant, 0.5))
    except ReplyError:
        OUTCOMES['refused'] += 1
        return
    OUTCOMES['replied'] += 1
    parsed = parse_reply(data, '4.6')
    assert parse_reply(data, '4.7') == parsed


def test_nasty_message_values_never_make_a_non_finite_reply():
    for key in OUTCOMES:
        OUTCOMES[key] = 0
    check_message_values()
    # Both paths ran: replies that SITL's parsers read, and refusals.
    assert OUTCOMES['replied'] >= 50 and OUTCOMES['refused'] + OUTCOMES['unavailable'] >= 20, \
        OUTCOMES


# The servo-packet parser on any bytes: a packet exactly when SITL's own layout says so
# (ArduPilot's libraries/SITL/examples/JSON/readme.md: uint16 magic, uint16 frame_rate, uint32
# frame_count, uint16 pwm[16] with magic 18458, 40 bytes; pwm[32] with magic 29569, 72
# bytes), with its fields where the layout puts them; anything else is a one-line
# ServoPacketError, never another exception.
LAYOUTS = {18458: (40, 16), 29569: (72, 32)}
packet_like = st.one_of(
    st.binary(max_size=100),
    st.builds(lambda magic, body: struct.pack('<H', magic) + body,
              st.sampled_from(sorted(LAYOUTS) + [0, 65535]), st.binary(max_size=80)),
    st.builds(lambda magic, size, seed: struct.pack('<H', magic) + bytes(
        (seed * 31 + 7 * i) % 256 for i in range(size - 2)),
        st.sampled_from(sorted(LAYOUTS)), st.sampled_from([38, 39, 40, 41, 70, 71, 72, 73]),
        st.integers(0, 255)))


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(packet_like)
def test_any_bytes_are_a_servo_packet_as_sitl_lays_it_out_or_one_line_refusal(data):
    magic = struct.unpack_from('<H', data)[0] if len(data) >= 2 else None
    layout = LAYOUTS.get(magic)
    try:
        packet = decode_servo_packet(data)
    except ServoPacketError as error:
        assert layout is None or len(data) != layout[0], f'{data.hex()} refused: {error}'
        assert str(error) and '\n' not in str(error) and error.size == len(data)
        return
    assert layout is not None and len(data) == layout[0], f'{data.hex()} taken as a packet'
    rate, frame_count = struct.unpack_from('<HI', data, 2)
    assert (packet.frame_rate, packet.frame_count) == (rate, frame_count)
    assert packet.pwm == struct.unpack_from(f'<{layout[1]}H', data, 8)
    following = next_frame_datagram(data)
    if frame_count < 2 ** 32 - 1:
        assert decode_servo_packet(following).frame_count == frame_count + 1
        assert following[:4] + following[8:] == data[:4] + data[8:]
    else:
        assert following is None


# Parameters as a YAML file or ROS may give them: any value for any known name (or a near
# miss of one) is a BridgeConfig whose numbers are all finite, or one ConfigError line.
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                    st.sampled_from(['imu', 'odom', '/abs', 'child', 'world', 'range',
                                     'laser_scan', 'actuators', 'float64',
                                     'float64_multi_array', 'velocity', 'position']))
yaml_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=10)
GROUP_KEYS = [f'outputs.m.{name}' for name in OUTPUT_SETTINGS]
parameter_names = st.one_of(st.sampled_from(sorted(PARAMETER_DEFAULTS) + GROUP_KEYS
                                            + ['output_groups', 'outputs.x.type', 'imu_tpoic']),
                            st.text(max_size=12))
group_base = {'output_groups': ['m'], 'outputs.m.type': 'actuators',
              'outputs.m.channels': [1, 2, 3, 4]}


def finite_numbers(value) -> bool:
    """Tell whether every number in a configuration (dataclasses, tuples) is finite."""
    if isinstance(value, float):
        return math.isfinite(value)
    if dataclasses.is_dataclass(value):
        return all(finite_numbers(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, (tuple, list)):
        return all(finite_numbers(v) for v in value)
    return True


def assert_finite_config_or_one_error(parameters: dict) -> None:
    """Check that parameters make a config of finite numbers, or one ConfigError line."""
    try:
        config = config_from_parameters(parameters)
    except ConfigError as error:
        assert str(error) and '\n' not in str(error)
        return
    assert finite_numbers(config), config


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(st.dictionaries(parameter_names, yaml_values, max_size=6), st.booleans())
def test_any_parameter_values_are_a_finite_config_or_one_config_error(values, with_group):
    assert_finite_config_or_one_error(dict(group_base, **values) if with_group else values)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(st.one_of(
    st.binary(max_size=200),
    yaml_values.map(lambda v: yaml.safe_dump(v).encode()),
    st.builds(lambda section, body: yaml.safe_dump({section: {'ros__parameters': body}}).encode(),
              st.sampled_from(['/**', NODE_NAME, 'other']), yaml_values)))
def test_any_parameter_file_is_parameters_or_one_config_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp('parameters') / 'file.yaml'
    path.write_bytes(data)
    try:
        parameters = load_parameters_file(str(path))
    except ConfigError as error:
        assert str(error).startswith(str(path)) and '\n' not in str(error), str(error)
        return
    assert isinstance(parameters, dict) and all(isinstance(k, str) for k in parameters)


# The bridge's presets (gz_bridge_*.yaml configure ros_gz_bridge, not the bridge).
PRESETS = sorted(path for path in glob.glob(os.path.join(os.path.dirname(__file__), '..',
                                                         'config', '*.yaml'))
                 if not os.path.basename(path).startswith('gz_bridge'))


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(st.sampled_from(PRESETS), st.data())
def test_a_shipped_preset_with_any_value_changed_loads_or_is_one_config_error(preset, data):
    parameters = load_parameters_file(preset)
    name = data.draw(st.sampled_from(sorted(parameters)), label='parameter')
    parameters[name] = data.draw(yaml_values, label='value')
    assert_finite_config_or_one_error(parameters)


# The bag reader on damaged bags: messages whose bytes (CDR) are cut or overwritten, inside a
# sound container, and storage files cut or overwritten. check and replay read each one to
# its end or stop with one BagError line; never an exception of another kind, in the caller
# or in the replay's thread, and never a hang.
BAG_TOPICS = {'/imu': IMU_TYPE, '/odom': ODOMETRY_TYPE, '/clock': CLOCK_TYPE}
# rosbags takes a tenth of a second to open a bag, and each example opens one five times.
BAG_EXAMPLES = max(8, FUZZ_EXAMPLES // 25)


def sound_messages() -> list:
    """(topic, log time in ns, CDR bytes) of a vehicle at rest: 10 IMU, odometry and clock."""
    messages = []
    for k in range(10):
        stamp = 0.01 * k
        for topic, message in (
                ('/imu', msgs.imu(STORE, stamp, (0.0, 0.0, 0.0), (0.0, 0.0, 9.81))),
                ('/odom', msgs.odometry(STORE, stamp, (0.0, 0.0, 0.1), (0.0, 0.0, 0.0, 1.0))),
                ('/clock', msgs.clock(STORE, stamp))):
            messages.append((topic, round(stamp * 1e9),
                             bytes(STORE.serialize_cdr(message, BAG_TOPICS[topic]))))
    return messages


SOUND = sound_messages()
damage = st.tuples(st.integers(0, 10 ** 6), st.binary(max_size=12), st.booleans())


def damaged(data: bytes, where: int, patch: bytes, cut: bool) -> bytes:
    """Return data overwritten with patch at where (modulo its length), or cut there."""
    at = where % (len(data) + 1)
    return data[:at] if cut else data[:at] + patch + data[at + len(patch):]


def read_as_check_and_replay(bag: str) -> str:
    """Run check and a replay over bag; return how each ended ('read' or 'refused')."""
    from ardupilot_json_bridge.cli import parse_arguments, run_check
    from ardupilot_json_bridge.sources.bagfile import BagError
    from ardupilot_json_bridge.sources.replay import BagReplay, ReplaySettings
    outcomes = []
    try:
        assert run_check(parse_arguments(['check', bag]), threading.Event()) in (0, 1)
        outcomes.append('read')
    except BagError as error:
        assert '\n' not in str(error), str(error)
        outcomes.append('refused')
    state = SensorState(CONFIG.state)
    failures = []
    previous, threading.excepthook = threading.excepthook, failures.append
    try:
        replay = BagReplay(ReplaySettings(bag, rate=1000.0), input_routes(CONFIG, state), state,
                           logger=logging.getLogger('fuzz.replay'))
        replay.start()
        assert replay.finished.wait(20.0), 'the replay hung'
        replay.stop()
        outcomes.append('read')
    except BagError as error:
        assert '\n' not in str(error), str(error)
        outcomes.append('refused')
    finally:
        threading.excepthook = previous
    assert not failures, f'the replay thread raised {failures[0].exc_value!r}'
    return ' '.join(outcomes)


BAG_OUTCOMES = collections.Counter()


@settings(max_examples=BAG_EXAMPLES, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(SOUND) - 1), damage), min_size=1, max_size=4))
def check_damaged_messages(tmp_path_factory, damages):
    messages = list(SOUND)
    for index, (where, patch, cut) in damages:
        topic, log_time, data = messages[index]
        messages[index] = (topic, log_time, damaged(data, where, patch, cut))
    bag = str(tmp_path_factory.mktemp('bag') / 'damaged')
    write_bag(bag, [(t, BAG_TOPICS[t], ns, data) for t, ns, data in messages], STORE)
    BAG_OUTCOMES[read_as_check_and_replay(bag)] += 1


def test_damaged_messages_are_read_or_refused_in_one_line(tmp_path_factory):
    BAG_OUTCOMES.clear()
    check_damaged_messages(tmp_path_factory)
    # Both ends were reached: damaged values read through, and refusals.
    assert any('read' in o for o in BAG_OUTCOMES) and any('refused' in o for o in
                                                          BAG_OUTCOMES), BAG_OUTCOMES


@settings(max_examples=BAG_EXAMPLES, deadline=None)
@given(st.sampled_from(['sqlite3', 'mcap']), st.sampled_from(['storage', 'metadata.yaml']),
       damage)
def test_a_damaged_bag_file_is_read_or_refused_in_one_line(tmp_path_factory, storage, part,
                                                           file_damage):
    bag = tmp_path_factory.mktemp('bag') / 'damaged'
    write_bag(str(bag), [(t, BAG_TOPICS[t], ns, data) for t, ns, data in SOUND], STORE,
              storage=storage)
    (path,) = [p for p in bag.iterdir() if (p.name == 'metadata.yaml') == (part != 'storage')]
    path.write_bytes(damaged(path.read_bytes(), *file_damage))
    read_as_check_and_replay(str(bag))
