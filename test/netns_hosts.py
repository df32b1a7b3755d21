"""
Hosts for tests, made of Linux network namespaces: SITL, the bridge and ROS on separate hosts.

Network(['sitl', 'bridge']) makes one namespace per host, named uniquely for this run, joined by
a Linux bridge in a namespace of its own (a switch): every host gets a veth into the switch and
an address of 10.231.0.0/24 inside its own namespace only; nothing is added outside them.
host.command(...) runs a program on a host (`ip netns exec`); on_host(host, function) calls
function in a thread that has entered the host's namespace, so sockets it opens (a MAVLink
connection, a DDS participant) live on that host. Closing the network ends every process left
in its namespaces and deletes them. Needs root and `ip netns`; missing() says why not, in a line.
"""

import ctypes
import os
import secrets
import shutil
import subprocess
import threading
from typing import Callable, Dict, List, Optional, Sequence, TypeVar

SUBNET = '10.231.0'
CLONE_NEWNET = 0x40000000
Result = TypeVar('Result')


def _ip(*arguments: str) -> None:
    subprocess.run(['ip', *arguments], check=True, capture_output=True, text=True)


def missing() -> Optional[str]:
    """Say in one line why network namespaces cannot be made here, or None if they can."""
    if shutil.which('ip') is None:
        return 'needs the ip command (iproute2) for network namespaces'
    if os.geteuid() != 0:
        return 'needs root for network namespaces (ip netns add)'
    probe = f'probe-{os.getpid()}-{secrets.token_hex(3)}'
    try:
        _ip('netns', 'add', probe)
    except subprocess.CalledProcessError as error:
        return f'ip netns add failed: {error.stderr.strip()}'
    _ip('netns', 'delete', probe)
    return None


class Host:
    """One host: a network namespace with one address on the test network."""

    def __init__(self, name: str, namespace: str, address: str, interface: str) -> None:
        self.name = name
        self.namespace = namespace
        self.address = address
        self.interface = interface

    def command(self, *command: str) -> List[str]:
        """Return command as it runs on this host."""
        return ['ip', 'netns', 'exec', self.namespace, *command]


def on_host(host: Host, function: Callable[[], Result]) -> Result:
    """Call function in a thread inside host's namespace and return what it returned."""
    outcome: Dict[str, object] = {}

    def run() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        descriptor = os.open(f'/var/run/netns/{host.namespace}', os.O_RDONLY)
        try:
            if libc.setns(descriptor, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f'setns into {host.namespace} failed')
            outcome['result'] = function()
        except BaseException as error:   # handed to the caller's thread
            outcome['error'] = error
        finally:
            os.close(descriptor)

    thread = threading.Thread(target=run, name=f'on-{host.name}')
    thread.start()
    thread.join()
    if 'error' in outcome:
        raise outcome['error']
    return outcome['result']


class Network:
    """Hosts on one switch, each in a namespace of its own, named uniquely for this run."""

    def __init__(self, names: Sequence[str]) -> None:
        tag = f'{os.getpid() % 100000}{secrets.token_hex(2)}'
        self.switch = f'ajb-sw-{tag}'
        self.hosts: Dict[str, Host] = {}
        self._namespaces = [self.switch]
        try:
            _ip('netns', 'add', self.switch)
            self._switch('ip', 'link', 'add', 'br0', 'type', 'bridge')
            self._switch('ip', 'link', 'set', 'br0', 'up')
            for index, name in enumerate(names, start=1):
                self.hosts[name] = self._add_host(name, index, tag)
        except BaseException:
            self.close()
            raise

    def _switch(self, *command: str) -> None:
        subprocess.run(['ip', 'netns', 'exec', self.switch, *command], check=True,
                       capture_output=True, text=True)

    def _add_host(self, name: str, index: int, tag: str) -> Host:
        namespace = f'ajb-{name}-{tag}'
        _ip('netns', 'add', namespace)
        self._namespaces.append(namespace)
        host = Host(name, namespace, f'{SUBNET}.{index}', 'eth0')
        port = f'p{index}'
        # Made inside the host, the veth's far end is moved to the switch and joins its bridge.
        run = host.command
        subprocess.run(run('ip', 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', port),
                       check=True, capture_output=True, text=True)
        subprocess.run(run('ip', 'link', 'set', port, 'netns', self.switch), check=True,
                       capture_output=True, text=True)
        self._switch('ip', 'link', 'set', port, 'master', 'br0')
        self._switch('ip', 'link', 'set', port, 'up')
        for command in (['ip', 'addr', 'add', f'{host.address}/24', 'dev', 'eth0'],
                        ['ip', 'link', 'set', 'eth0', 'up'],
                        ['ip', 'link', 'set', 'lo', 'up'],
                        # Multicast (DDS discovery) leaves by the test network.
                        ['ip', 'route', 'add', '224.0.0.0/4', 'dev', 'eth0']):
            subprocess.run(run(*command), check=True, capture_output=True, text=True)
        return host

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def close(self) -> None:
        """End every process still in the namespaces, then delete them."""
        for namespace in self._namespaces:
            pids = subprocess.run(['ip', 'netns', 'pids', namespace], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(['ip', 'netns', 'delete', namespace], capture_output=True)
        self._namespaces = []

    def __enter__(self) -> 'Network':
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
