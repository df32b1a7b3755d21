"""
The servo_pwm recording topic: every SITL frame's PWM, stamped with its physics time.

sensor_msgs/JointState, the stamped array of named values that common_interfaces has on Humble
and Jazzy alike (std_msgs has no stamped array; actuator_msgs is not in common_interfaces):
name servo1 .. servoN as ArduPilot's SERVOn, position the pulse width in microseconds (a
float64 holds every uint16 exactly), velocity and effort empty. The header stamp is the physics
time of the state SITL computed the PWM from, so a recording places each frame's PWM on the
IMU's clock, not where a batch happened to be logged. Recordings made before this carry
std_msgs/UInt16MultiArray, with no stamp: pwm_sample reads both.
"""

from functools import lru_cache
import struct
from typing import Any, Optional, Sequence, Tuple

from ardupilot_json_bridge.messages.cdr_writer import ENCAPSULATION, header_bytes, pad

SERVO_PWM_TYPE = 'sensor_msgs/msg/JointState'
# What servo_pwm carried before it had a stamp; pwm_sample reads it too.
LEGACY_SERVO_PWM_TYPE = 'std_msgs/msg/UInt16MultiArray'
# The frame of the servo outputs: the vehicle's body, as REP 105 names it.
SERVO_FRAME_ID = 'base_link'


def channel_name(channel: int) -> str:
    """Return the name of the 0-based channel: servo1 for SERVO1."""
    return f'servo{channel + 1}'


@lru_cache(maxsize=8)
def _names(count: int, offset: int) -> bytes:
    """Return the serialized names of count channels, starting offset bytes into the body."""
    body = struct.pack('<I', count)
    for channel in range(count):
        name = channel_name(channel).encode() + b'\x00'
        body += bytes(-(offset + len(body)) % 4) + struct.pack('<I', len(name)) + name
    return body


def encode_servo_pwm(stamp: float, pwm: Sequence[int], frame_id: str = SERVO_FRAME_ID) -> bytes:
    """Return a frame's PWM as a serialized (CDR) sensor_msgs/JointState, stamped stamp s."""
    head = pad(header_bytes(stamp, frame_id), 4)
    body = head + _names(len(pwm), len(head))
    body = pad(body, 4) + struct.pack('<I', len(pwm))
    if pwm:
        body = pad(body, 8) + struct.pack(f'<{len(pwm)}d', *pwm)
    return ENCAPSULATION + pad(body, 4) + struct.pack('<II', 0, 0)


def pwm_sample(message: Any, logged: float) -> Tuple[float, Tuple[int, ...], Optional[str]]:
    """
    Return (time, PWM, problem) of a recorded servo_pwm message, decoded.

    A JointState gives its header stamp; an older recording's UInt16MultiArray has none, and
    takes logged, the time it was logged at. problem names a message that cannot be PWM.
    """
    header = getattr(message, 'header', None)
    if header is None:
        return logged, tuple(int(v) for v in message.data), None
    stamp = header.stamp.sec + header.stamp.nanosec * 1e-9
    values = list(message.position)
    if not all(0.0 <= v <= 65535.0 and v == int(v) for v in values):
        return stamp, (), f'servo_pwm at {stamp:.3f} s: positions {values[:4]}... are not PWM'
    return stamp, tuple(int(v) for v in values), None
