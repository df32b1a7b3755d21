"""
Which SITL a link answers: the first to send, until it restarts or falls silent.

A servo packet from another address is a second SITL on the same port (ignored, counted and
warned of, rate-limited) while the peer was heard within peer_timeout (the link's setting as
it is then: `ros2 param set` changes it while the bridge runs). From frame 0, or after
that much silence, it is the peer restarted or moved: a new session. How long a fleet's world
waits for a frame is another setting (hold_timeout): this one only says when a stranger may
take the port over.
"""

import enum
import logging
from typing import Optional

from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.link.udp_port import Address


class PeerVerdict(enum.Enum):
    """What a servo packet's sender is to the link."""

    PEER = 'peer'                # the SITL the link answers (or the first to send)
    NEW_SESSION = 'new session'  # the peer restarted or moved: start the session again
    STRANGER = 'stranger'        # another SITL on the port: ignored


class PeerLock:
    """The one SITL address a link answers, and when it last heard from it."""

    def __init__(self, logger: logging.Logger, warnings: RateLimitedLog, prefix: str) -> None:
        self.peer: Optional[Address] = None
        self.heard = 0.0
        self._logger = logger
        self._warnings = warnings
        self._prefix = prefix

    def accept(self, sender: Address, frame_count: int, channel_count: int, now: float,
               peer_timeout: float) -> PeerVerdict:
        """Judge a packet of frame_count from sender at now; lock to sender unless a stranger."""
        peer = self.peer
        verdict = PeerVerdict.PEER
        if peer is None:
            self._logger.info(f'{self._prefix}SITL connected from {sender[0]}:{sender[1]} '
                              f'({channel_count} channels, frame {frame_count})')
        elif sender != peer:
            silent = now - self.heard
            if frame_count == 0:
                self._logger.warning(f'{self._prefix}SITL restarted at {sender[0]}:{sender[1]} '
                                     f'(frame 0; it was at {peer[0]}:{peer[1]}, heard '
                                     f'{silent:.1f} s ago): new session, time starts again '
                                     'at 0')
            elif silent <= peer_timeout:
                self._warnings.warning(
                    'stranger', f'{self._prefix}ignored servo packets from {sender[0]}:'
                                f'{sender[1]} (frame {frame_count}): locked to SITL at '
                                f'{peer[0]}:{peer[1]}, heard {silent:.1f} s ago. Two SITL '
                                'instances on one port? Give each vehicle its own -I instance.')
                return PeerVerdict.STRANGER
            else:
                self._logger.warning(f'{self._prefix}SITL moved from {peer[0]}:{peer[1]} to '
                                     f'{sender[0]}:{sender[1]} after {silent:.1f} s of silence '
                                     '(restarted?): new session')
            verdict = PeerVerdict.NEW_SESSION
        self.peer = sender
        self.heard = now
        return verdict
