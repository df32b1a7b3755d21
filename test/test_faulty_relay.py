"""The tests' faulty relay: its faults happen at the rates asked, and its judge of replies."""

import socket
import struct
import threading
import time

import pytest

from ardupilot_json_bridge.core.protocol import encode_servo_packet
from conftest import free_udp_port
from faulty_relay import FaultyRelay, wrong_answers

REPLY = '\n{{"timestamp":{0!r},"imu":{{"gyro":[0,0,0],"accel_body":[0,0,-9.8]}},' \
            '"position":[0,0,0],"quaternion":[1,0,0,0],"velocity":[0,0,0]}}\n'


def frame(count: int, copy: bool = False) -> tuple:
    """Return a servo packet handed to the bridge (copy: the wire's second copy of one)."""
    return ('frame', count, copy)


def reply(timestamp: float) -> tuple:
    """Return a reply the bridge sent."""
    return ('reply', timestamp, False)


def test_replies_to_each_new_frame_and_repeats_to_the_newest_are_right():
    events = [frame(0), reply(0.001), frame(1), reply(0.002),
              frame(1), reply(0.002),                    # SITL resent frame 1: same reply
              frame(3), reply(0.003),                    # frame 2 never came: a new step
              frame(4), frame(5), reply(0.004), reply(0.005)]   # two in flight
    assert wrong_answers(events) == []


@pytest.mark.parametrize('late_reply, why', [
    (0.0, 'timestamp going back: a false restart'),
    (0.002, 'the answer to frame 1 again, though SITL is past it'),
    (0.004, 'a new reply with no new frame to answer'),
])
def test_a_reply_to_a_late_frame_is_wrong(late_reply, why):
    events = [frame(0), reply(0.001), frame(1), reply(0.002), frame(2), reply(0.003),
              frame(1, copy=True), reply(late_reply)]   # the wire's late copy, answered
    wrong = wrong_answers(events)
    assert len(wrong) == 1 and wrong[0].startswith('event 7:'), (why, wrong)


def test_a_reply_to_the_wires_copy_of_the_frame_just_answered_is_wrong():
    # SITL reads that second reply as the next frame's: every reply after it one frame late.
    events = [frame(0), reply(0.001), frame(1), reply(0.002), frame(1, copy=True),
              reply(0.002)]
    wrong = wrong_answers(events)
    assert len(wrong) == 1 and 'which SITL sent 1 time(s)' in wrong[0], wrong


def test_late_frames_and_copies_left_unanswered_are_right():
    events = [frame(0), reply(0.001), frame(1), reply(0.002),
              frame(0, copy=True), frame(1, copy=True), frame(2), reply(0.003)]
    assert wrong_answers(events) == []


def echo(bridge: socket.socket) -> None:
    """Answer each servo packet with a reply stamped with its frame count / 1200."""
    while True:
        data, sender = bridge.recvfrom(1024)
        if not data:
            return
        count = struct.unpack_from('<I', data, 4)[0]
        bridge.sendto(REPLY.format(count / 1200).encode(), sender)


def test_the_relay_loses_doubles_and_reorders_at_about_the_rates_asked_both_ways():
    bridge = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    bridge.bind(('127.0.0.1', 0))
    answering = threading.Thread(target=echo, args=(bridge,), daemon=True)
    answering.start()
    sitl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sitl.bind(('127.0.0.1', 0))
    received = []   # (datagram, sender) until the empty datagram that ends the test
    counting = threading.Thread(target=lambda: received.extend(iter(
        lambda: sitl.recvfrom(1024), (b'', sitl.getsockname()))), daemon=True)
    counting.start()
    sent = 3000
    with FaultyRelay(('127.0.0.1', free_udp_port()), bridge.getsockname(), seed=7,
                     loss=0.02, duplication=0.02) as relay:
        target = relay.sitl_side.getsockname()
        for count in range(sent):
            sitl.sendto(encode_servo_packet(count, [1000] * 16, 1200), target)
            time.sleep(0.0005)   # several in flight: the jitter reorders them
        time.sleep(0.5)
        to_bridge, to_sitl = relay.faults['to_bridge'], relay.faults['to_sitl']
        handed = [value for kind, value, _ in relay.record.events if kind == 'frame']
    for sock, thread in ((bridge, answering), (sitl, counting)):
        sock.sendto(b'', sock.getsockname())
        thread.join(2.0)
    bridge.close()
    sitl.close()
    # The relay's replies; not a stray datagram of an earlier test's process to this port.
    replies = [data for data, sender in received if sender == target]
    # Binomial(3000, 0.02): 60 expected; 4.3 standard deviations either side is 27 to 93.
    assert 27 <= to_bridge.lost <= 93 and 27 <= to_bridge.duplicated <= 93, to_bridge
    assert to_bridge.passed == sent - to_bridge.lost + to_bridge.duplicated == len(handed)
    assert to_bridge.reordered > 0 and to_sitl.reordered > 0, (to_bridge, to_sitl)
    assert to_sitl.lost > 0 and to_sitl.duplicated > 0, to_sitl
    # Every datagram the bridge answered came back once, twice (doubled) or not at all (lost).
    assert to_sitl.passed == to_bridge.passed - to_sitl.lost + to_sitl.duplicated == len(replies)
    assert handed != sorted(handed)
