"""
SITL's UDP port: bound with one clear line when it cannot be, and woken from another thread.

The port is 9002 + 10 x instance (core/settings.py); "in use" names the process holding it.
"""

import errno
import socket
from typing import Optional, Tuple

from ardupilot_json_bridge.core.settings import SITL_BASE_PORT, SITL_PORT_STRIDE
from ardupilot_json_bridge.link.portowner import udp_port_owner

# A UDP datagram can be no longer; SITL's servo packets are 40 or 72 bytes.
MAX_DATAGRAM = 65536

Address = Tuple[str, int]


class LinkError(RuntimeError):
    """The link cannot run; the message says why and what to do."""


def bind_udp(address: str, port: int, instance: int) -> socket.socket:
    """Bind the listening socket, explaining an address already in use."""
    family = socket.AF_INET6 if ':' in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.bind((address, port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            owner = udp_port_owner(port)
            culprit = f'it is held by {owner}' if owner else (
                "another bridge, Gazebo's ArduPilotPlugin or a second vehicle configured "
                'with the same instance is the usual culprit')
            raise LinkError(
                f'UDP port {port} on {address} (SITL instance {instance}) is already in use: '
                f'{culprit}. Stop it, or give each vehicle its own instance '
                f'(port {SITL_BASE_PORT} + {SITL_PORT_STRIDE} x instance).') from None
        raise LinkError(f'cannot listen on UDP {address}:{port} '
                        f'(SITL instance {instance}): {error.strerror}') from None
    return sock


def wake(bound: Address) -> Optional[OSError]:
    """
    Send an empty datagram to a socket bound at bound, so that its blocked recvfrom returns.

    A wildcard address is reached on the loopback. Returns the error where sending failed.
    """
    host = bound[0]
    if host in ('0.0.0.0', '::'):
        host = '127.0.0.1' if host == '0.0.0.0' else '::1'
    family = socket.AF_INET6 if ':' in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as waker:
        try:
            waker.sendto(b'', (host, bound[1]))
        except OSError as error:
            return error
    return None
