"""The test SITL peer must tell a good reply from a bad one, or the other tests prove little."""

import dataclasses
import re
import socket
import threading
import time

import pytest

from ardupilot_json_bridge.core.protocol import decode_servo_packet, encode_reply, SensorReply
from sitl_peer import parse_reply, RESEND_INTERVAL, SecondReply, SitlPeer, SitlRejected

REPLY = SensorReply(
    timestamp=1.5, gyro=(0.1, 0.2, 0.3), accel_body=(0.0, 0.0, -9.80665),
    position=(1.0, 2.0, 3.0), velocity=(4.0, 5.0, 6.0), quaternion=(1.0, 0.0, 0.0, 0.0),
    velocity_wind=(7.0, 8.0, 9.0), rc=tuple(1000.0 + i for i in range(1, 13)))
GOOD = encode_reply(REPLY)[0].decode()


def test_good_reply_parses_in_both_dialects():
    for dialect in ('4.6', '4.7'):
        assert parse_reply(GOOD.encode(), dialect)['velocity'] == (4.0, 5.0, 6.0)


def test_space_after_colon_fails_the_46_parser_but_not_47():
    spaced = GOOD.replace('"gyro":', '"gyro": ')
    with pytest.raises(SitlRejected, match='imu/gyro'):
        parse_reply(spaced.encode(), '4.6')
    gyro = parse_reply(spaced.encode(), '4.7')['imu.gyro']
    assert gyro == pytest.approx((0.1, 0.2, 0.3), rel=1e-7)  # written as float32


def test_space_before_colon_silently_reads_zero():
    spaced = GOOD.replace('"timestamp":', '"timestamp" :')
    assert parse_reply(spaced.encode())['timestamp'] == 0.0


@pytest.mark.parametrize('dialect', ['4.6', '4.7'])
def test_nan_fails(dialect):
    with pytest.raises(SitlRejected, match='non-finite'):
        parse_reply(re.sub(r'"velocity":\[[^,]*', '"velocity":[NaN', GOOD).encode(), dialect)


@pytest.mark.parametrize('dialect', ['4.6', '4.7'])
def test_velocity_wind_before_velocity_fails(dialect):
    wind = ',"velocity_wind":[7.0,8.0,9.0]'
    moved = GOOD.replace(wind, '').replace('"timestamp":1.5', '"timestamp":1.5' + wind)
    with pytest.raises(SitlRejected, match='velocity'):
        parse_reply(moved.encode(), dialect)


def test_rc_10_before_rc_1_reads_wrong_values():
    moved = GOOD.replace('"rc_1":1001.0,', '').replace('"rc_12":1012.0',
                                                       '"rc_12":1012.0,"rc_1":1001.0')
    moved = moved.replace('"rc":{"rc_2"', '"rc":{"rc_10":1010.0,"rc_2"', 1)
    parsed = parse_reply(moved.encode())
    assert parsed['rc.rc_1'] != 1001.0


def test_missing_leading_newline_fails():
    with pytest.raises(SitlRejected, match='framed'):
        parse_reply(GOOD[1:].encode())


def test_missing_mandatory_key_fails():
    with pytest.raises(SitlRejected, match='position'):
        parse_reply(GOOD.replace('"position"', '"pos"').encode())


def test_true_reads_as_false():
    parsed = parse_reply(GOOD.replace('}\n', ',"no_time_sync":true}\n').encode())
    assert parsed['no_time_sync'] is False


class ScriptedBridge:
    """A bridge stand-in: answers frame k with replies[k] copies of a reply at time k ms."""

    def __init__(self, replies):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(('127.0.0.1', 0))
        self.sock.settimeout(5.0)
        self.replies = replies
        self.arrivals = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        try:
            while True:
                data, sender = self.sock.recvfrom(1024)
                frame = decode_servo_packet(data).frame_count
                self.arrivals.append((frame, time.monotonic()))
                copies = self.replies.get(frame, 1)
                self.replies[frame] = 1  # a resend is answered once
                reply = encode_reply(dataclasses.replace(REPLY, timestamp=frame / 1000))[0]
                for _ in range(copies):
                    self.sock.sendto(reply, sender)
        except OSError:
            return


def test_the_peer_fails_on_a_second_reply_to_a_frame():
    bridge = ScriptedBridge({1: 2})
    peer = SitlPeer(bridge.sock.getsockname()[1])
    try:
        with pytest.raises(SecondReply, match='frame 2'):
            peer.lock_step(4, timeout=5.0)
    finally:
        peer.close()
        bridge.sock.close()


def test_the_peer_resends_an_unanswered_frame_after_sitls_interval():
    bridge = ScriptedBridge({0: 0})
    peer = SitlPeer(bridge.sock.getsockname()[1])
    try:
        replies = peer.lock_step(2, timeout=5.0)
    finally:
        peer.close()
        bridge.sock.close()
    assert [r['timestamp'] for r in replies] == [0.0, 0.001]
    (first, sent), (again, resent) = bridge.arrivals[:2]
    assert first == again == 0 and peer.resends == 1
    assert resent - sent >= RESEND_INTERVAL - 0.01
