"""Fuzzing: no datagram crashes the link; no message value makes a non-finite reply."""

import logging

from hypothesis import example, given, HealthCheck, settings, strategies as st
import pytest

from ardupilot_json_bridge.config import config_from_parameters
from ardupilot_json_bridge.protocol import encode_reply, encode_servo_packet, ReplyError
from ardupilot_json_bridge.ratelimit import RateLimitedLog
from ardupilot_json_bridge.routes import deliver, input_routes
from ardupilot_json_bridge.state import build_reply, Instant, SensorState
import ros_messages as msgs
from sitl_peer import parse_reply

STORE = msgs.STORES['jazzy']
nasty = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e308, -1e308, 3.5e38, 1e-308, float('nan'), float('inf')]))
vec3 = st.tuples(nasty, nasty, nasty)
quat = st.tuples(nasty, nasty, nasty, nasty)
datagrams = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda n, pwm: encode_servo_packet(n, pwm), st.integers(0, 2**32 - 1),
              st.lists(st.integers(0, 65535), min_size=16, max_size=16)),
    st.builds(lambda n, pwm, cut: encode_servo_packet(n, pwm)[:cut],
              st.integers(0, 2**32 - 1),
              st.lists(st.integers(0, 65535), min_size=32, max_size=32),
              st.integers(0, 71)))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(datagrams, min_size=1, max_size=5))
def test_arbitrary_datagrams_never_crash_the_link(make_link, packets):
    link = getattr(test_arbitrary_datagrams_never_crash_the_link, 'link', None)
    if link is None:
        quiet = logging.getLogger('fuzz.link')
        quiet.setLevel(logging.CRITICAL)
        link = make_link(fresh_timeout=0.001, logger=quiet)
        test_arbitrary_datagrams_never_crash_the_link.link = link
    before = link.stats.received
    for data in packets:
        link.handle_datagram(data, ('127.0.0.1', 40000))
    assert link.stats.received == before + len(packets)


@pytest.fixture(autouse=True)
def _forget_link():
    yield
    test_arbitrary_datagrams_never_crash_the_link.link = None


CONFIG = config_from_parameters({
    'rangefinder_1_topic': 'range', 'rangefinder_2_topic': 'scan',
    'rangefinder_2_type': 'laser_scan', 'wind_topic': 'wind', 'airspeed_topic': 'airspeed',
    'battery_topic': 'battery', 'rc_topic': 'joy'})


@settings(max_examples=400, deadline=None)
@example(position=(0.0, 0.0, 0.0), orientation=(0.0, 0.0, 0.0, 1.0), linear=(0.0, 0.0, 0.0),
         angular=(0.0, 0.0, 0.0), gyro=(1e308, 0.0, 0.0), accel=(0.0, 0.0, 9.8), distance=1.0,
         scan=[], wind=(0.0, 0.0, 0.0), airspeed=1.0, voltage=1.0, current=1.0, axes=[],
         dt=0.001)
@given(position=vec3, orientation=quat, linear=vec3, angular=vec3, gyro=vec3, accel=vec3,
       distance=nasty, scan=st.lists(nasty, max_size=5), wind=vec3, airspeed=nasty,
       voltage=nasty, current=nasty, axes=st.lists(nasty, max_size=4), dt=nasty)
def test_nasty_message_values_never_make_a_non_finite_reply(
        position, orientation, linear, angular, gyro, accel, distance, scan, wind, airspeed,
        voltage, current, axes, dt):
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
    instant = state.wait_for_instant(0, 0.0)
    if not isinstance(instant, Instant):
        return
    try:
        data, _ = encode_reply(build_reply(instant, 0.5))
    except ReplyError:
        return
    parsed = parse_reply(data, '4.6')
    assert parse_reply(data, '4.7') == parsed
