"""Who holds a UDP port: names the culprit when the link cannot bind (Linux /proc only)."""

import os
from typing import Optional


def _socket_inodes(port: int) -> set:
    inodes = set()
    for table in ('/proc/net/udp', '/proc/net/udp6'):
        try:
            with open(table) as lines:
                next(lines, None)
                for line in lines:
                    fields = line.split()
                    if len(fields) > 9 and int(fields[1].rsplit(':', 1)[1], 16) == port:
                        inodes.add(fields[9])
        except OSError:
            continue
    return inodes


def shorten(command: str, limit: int = 100) -> str:
    """Shorten to a command line cut to one readable line."""
    line = ' '.join(command.split())
    return line if len(line) <= limit else line[:limit - 3] + '...'


def udp_port_owner(port: int) -> Optional[str]:
    """'pid N: command line' of a process holding UDP port, or None if it cannot be told."""
    inodes = {f'socket:[{inode}]' for inode in _socket_inodes(port)}
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            fds = os.listdir(f'/proc/{pid}/fd')
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f'/proc/{pid}/fd/{fd}') in inodes:
                    with open(f'/proc/{pid}/cmdline', 'rb') as cmdline:
                        command = cmdline.read().replace(b'\0', b' ').decode(errors='replace')
                    return f'pid {pid}: {shorten(command.strip())}'
            except OSError:
                continue
    return None
