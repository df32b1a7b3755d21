"""The link in its own process: what the parent does with what the child sends back."""

import logging
import socket
import struct
import time
import types

from test_link import wait_for

from ardupilot_json_bridge.link.link_process import (
    LinkProcess, MAX_MESSAGE, PwmForwarder, RECORD_LATENCY, RECORDED)
from sitl_peer import SitlPeer


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
    forwarder = PwmForwarder(ours, record=True)
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
    # One message: its length (2 bytes), then the CDR UInt16MultiArray with the 16 values.
    (size,) = struct.unpack_from('<H', message, 1)
    assert size == len(message) - 3
    assert message[-32:] == struct.pack('<16H', *[1100 + i for i in range(16)])
