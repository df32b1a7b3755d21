"""Fuzzing: no datagram crashes the link; no message value makes a non-finite reply."""

import logging
import socket

from hypothesis import example, given, settings, strategies as st

from ardupilot_json_bridge.config import config_from_parameters
from ardupilot_json_bridge.core.protocol import encode_reply, encode_servo_packet, ReplyError
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.reply import build_reply
from ardupilot_json_bridge.core.samples import ImuSample, OdometrySample
from ardupilot_json_bridge.core.settings import StateSettings
from ardupilot_json_bridge.core.state import Instant, SensorState
from ardupilot_json_bridge.messages.routes import deliver, input_routes
import ros_messages as msgs
from sitl_peer import parse_reply

STORE = msgs.STORES['jazzy']
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
