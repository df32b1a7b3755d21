"""The link in its own process: what the parent does with what the child sends back."""

import logging
import math
import os
import signal
import socket
import struct
import time
import types

import pytest
from test_link import wait_for

from ardupilot_json_bridge.link.link_process import (
    LinkProcess, MAX_MESSAGE, PWM, PwmForwarder, RECORD_LATENCY, RECORDED)
from ardupilot_json_bridge.messages.cdr_writer import encode_imu, encode_odometry
import ros_messages
from sitl_peer import SitlPeer

# input_routes' order: odometry, then the IMU.
ODOMETRY_ROUTE, IMU_ROUTE = 0, 1


def test_publish_failures_are_logged_once_not_per_frame(caplog):
    # rclpy shutting down: every publish raises. Each frame's PWM and each servo_pwm batch
    # fails; one ERROR line for each, not one per frame or batch.
    calls = {'pwm': 0, 'recorded': 0}

    def fail(kind):
        def publish(*_):
            calls[kind] += 1
            raise RuntimeError('publisher destroyed')
        return publish

    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(('127.0.0.1', 0))
    logger = logging.getLogger('test.link_process.publish')
    link = LinkProcess({'port': udp.getsockname()[1], 'raw_pwm_topic': 'servo_pwm',
                        'fresh_timeout': 0.001}, udp, fail('pwm'), logger, fail('recorded'))
    peer = SitlPeer(udp.getsockname()[1])
    try:
        with caplog.at_level(logging.INFO, logger='test.link_process.publish'):
            for frame in range(1, 201):
                stamp = 10.0 + frame * 0.001    # physics to answer with, so frames record
                link.push_serialized(ODOMETRY_ROUTE, encode_odometry(
                    stamp, 'odom', 'base_link', (0, 0, 1), (0, 0, 0, 1), (0, 0, 0), (0, 0, 0)))
                link.push_serialized(IMU_ROUTE, encode_imu(stamp, 'base_link', (0, 0, 0, 1),
                                                           (0, 0, 0), (0, 0, 9.8)))
                peer.send(frame, pwm=[1000 + frame] * 16)
                time.sleep(0.002)
            assert wait_for(lambda: calls['pwm'] >= 20 and calls['recorded'] >= 5, 10.0), calls
    finally:
        peer.close()
        link.close()
        udp.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len([e for e in errors if 'actuator commands failed' in e]) == 1, errors[:3]
    assert len([e for e in errors if 'raw PWM failed' in e]) == 1, errors[:3]
    assert "RuntimeError('publisher destroyed')" in errors[0], errors[0]


def test_a_servo_pwm_batch_goes_once_due_without_a_later_frame():
    # SITL at 5 frames/s (slow physics): a frame's PWM must reach servo_pwm within about
    # RECORD_LATENCY, not wait for the next frame 0.2 s later (nor for a stats tick).
    ours, parent = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    forwarder = PwmForwarder(ours, record=True, physics_time=lambda: 12.345)
    forwarder.start()
    try:
        started = time.monotonic()
        forwarder.on_frame(types.SimpleNamespace(pwm=[1100 + i for i in range(16)],
                                                 frame_rate=5))
        parent.settimeout(5.0)
        kinds = []
        while RECORDED not in kinds:
            try:
                message = parent.recv(MAX_MESSAGE)
            except socket.timeout:
                raise AssertionError(f'no servo_pwm batch 5 s after the frame; got {kinds}')
            kinds.append(message[0])
        waited = time.monotonic() - started
    finally:
        forwarder.stop()
        ours.close()
        parent.close()
    assert waited >= RECORD_LATENCY
    # One message: its length (2 bytes), then the CDR JointState with the 16 values, stamped
    # with the physics time of the state SITL computed them from.
    (size,) = struct.unpack_from('<H', message, 1)
    assert size == len(message) - 3
    store = ros_messages.STORES['jazzy']
    recorded = store.deserialize_cdr(message[3:], 'sensor_msgs/msg/JointState')
    assert list(recorded.position) == [1100 + i for i in range(16)]
    assert (recorded.header.stamp.sec, recorded.header.stamp.nanosec) == (12, 345000000)


def test_a_frame_before_any_physics_time_commands_but_is_not_recorded():
    # SITL's first frame, before any reply: no physics time to stamp it with.
    ours, parent = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    forwarder = PwmForwarder(ours, record=True)
    try:
        forwarder.on_frame(types.SimpleNamespace(pwm=[1500] * 4, frame_rate=1200))
        forwarder.flush()
        parent.settimeout(0.5)
        kinds = []
        try:
            while True:
                kinds.append(parent.recv(MAX_MESSAGE))
        except socket.timeout:
            pass
    finally:
        forwarder.stop()
        ours.close()
        parent.close()
    assert [m[0] for m in kinds] == [PWM]
    stamp, rate, *pwm = struct.unpack('<dH4H', kinds[0][1:])
    assert math.isnan(stamp) and rate == 1200 and pwm == [1500] * 4


@pytest.mark.parametrize('unread', [0, 50])
def test_the_link_process_killed_is_told_once_and_closing_is_not(caplog, unread):
    # unread: samples the node forwarded that the child never read (a simulator publishing):
    # the channel then resets (ECONNRESET) instead of ending, which went unseen.
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(('127.0.0.1', 0))
    logger = logging.getLogger('test.link_process.ended')
    told = []
    link = LinkProcess({'port': udp.getsockname()[1]}, udp, lambda *_: None, logger,
                       on_ended=told.append)
    try:
        with caplog.at_level(logging.INFO, logger='test.link_process.ended'):
            assert wait_for(lambda: any('listening' in r.getMessage() for r in caplog.records),
                            30.0)
            os.kill(link.process.pid, signal.SIGSTOP)
            for _ in range(unread):
                link.push_serialized(0, b'\x00\x01\x00\x00' + bytes(300))
            os.kill(link.process.pid, signal.SIGKILL)
            assert wait_for(lambda: told, 10.0)
    finally:
        link.close()
        udp.close()
    assert told == ['the link process was killed by SIGKILL: SITL is no longer served']
    assert link.ended == told[0]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == told
    # A link closed by its node is no death.
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(('127.0.0.1', 0))
    closed = LinkProcess({'port': udp.getsockname()[1]}, udp, lambda *_: None, logger,
                         on_ended=told.append)
    closed.close()
    udp.close()
    closed._reader.join(5.0)
    assert len(told) == 1 and closed.ended is None
