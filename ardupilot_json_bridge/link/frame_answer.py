"""
What a lock-step engine's on_frame tells the link about a frame: the contract between them.

on_frame(packet) is called once for every new frame (and again for a frame it failed, when
SITL resends it). It returns one of:

- an Instant: the engine stepped the frame; the link answers from that instant at once;
- HELD: a fleet's world holds the frame; SitlLink.release answers it once the world has
  stepped (or fail_held leaves it to SITL's resend; a frame answered on arrival keeps that
  reply);
- None: the state answers the frame (free-running and reply-first sources, forwarders).

Anything else is refused, in one line, and the state answers.
"""

from typing import Callable, NamedTuple, Optional, Union

from ardupilot_json_bridge.core.protocol import ServoPacket
from ardupilot_json_bridge.core.state import Instant


class Held:
    """What on_frame returns for a frame a fleet's world holds (the one instance HELD)."""

    def __repr__(self) -> str:
        return 'HELD'


HELD = Held()

FrameAnswer = Union[Instant, Held, None]
FrameCallback = Callable[[ServoPacket], FrameAnswer]


class ReplyAhead(NamedTuple):
    """The reply to the frame after the one answered, encoded while SITL computes it."""

    datagram: bytes     # the frame expected: the same PWM and rate, frame_count one on
    instant: Instant    # what the engine stepped ahead to, and will return from on_frame
    timestamp: float
    reply: bytes


class FrameInHand(NamedTuple):
    """A frame in hand: answered now, or held for the fleet's world (SitlLink.release)."""

    packet: ServoPacket
    data: bytes
    received: float
    retry: bool                     # SITL sent it again after its on_frame failed
    sent: Optional[ReplyAhead]      # the reply it got on arrival (stepped ahead), if any


def is_frame_answer(answer: object) -> bool:
    """Whether answer keeps the contract: an Instant, HELD or None."""
    return answer is None or answer is HELD or isinstance(answer, Instant)
