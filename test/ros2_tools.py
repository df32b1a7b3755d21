"""
The ROS 2 command line as a user runs it, for the tests: ros2 launch, param, bag, and SITL.

Every `ros2 launch` runs in a process group of its own, as in a terminal, so Ctrl-C (SIGINT
to the group) and the check that nothing outlives it work as a user sees them. A terminal's
commands start with SIGINT at its default, whatever the tests were started with (see
Running).
"""

import filecmp
import glob
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

PACKAGE = 'ardupilot_json_bridge'
SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ros2_missing() -> Optional[str]:
    """Return why the sourced-ROS tests cannot run here, or None when they can."""
    if shutil.which('ros2') is None:
        return 'needs a sourced ROS 2 (source /opt/ros/jazzy/activate.sh): no ros2 on PATH'
    try:
        import launch_ros  # noqa: F401
        from ament_index_python.packages import get_package_share_directory
    except ImportError as error:
        return f'needs a sourced ROS 2 with launch_ros: {error}'
    try:
        share = get_package_share_directory(PACKAGE)
    except LookupError:
        return (f'needs {PACKAGE} built with colcon and its overlay sourced '
                '(source install/setup.bash)')
    ours = sorted(os.path.basename(p) for p in glob.glob(os.path.join(SOURCE, 'launch', '*')))
    _, differ, missing = filecmp.cmpfiles(os.path.join(SOURCE, 'launch'),
                                          os.path.join(share, 'launch'), ours, shallow=False)
    if differ or missing:
        return f'the sourced {PACKAGE} ({share}) is another build: colcon build this checkout'
    return None


def share(*parts: str) -> str:
    """Return a path in the installed package's share folder."""
    from ament_index_python.packages import get_package_share_directory
    return os.path.join(get_package_share_directory(PACKAGE), *parts)


def preset_with(folder: str, name: str, extra: str) -> str:
    """Write the installed MuJoCo preset with extra parameter lines as folder/name; its path."""
    with open(share('config', 'mujoco_quad_x.yaml')) as stream:
        text = stream.read()
    path = os.path.join(folder, name)
    with open(path, 'w') as stream:
        stream.write(text + extra)
    return path


def ros2(*arguments: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """
    Run one ros2 command to its end; stdout and stderr together.

    param and node verbs run without the ros2 daemon, which would outlive the tests.
    """
    if arguments[0] in ('param', 'node'):
        arguments = (*arguments[:2], '--no-daemon', *arguments[2:])
    return subprocess.run(['ros2', *arguments], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


def default_sigint() -> None:
    """
    Let the commands started from here take Ctrl-C as in a terminal.

    A shell starts a background job (`ci &`, nohup) with SIGINT ignored, and an ignored signal
    stays ignored across fork and exec, down to every ros2 command the tests start. `ros2 bag
    record` and `ros2 bag play` stop on Python's KeyboardInterrupt, which then never comes:
    the recorder ran on until killed, without writing metadata.yaml. A handled signal reverts
    to its default in a child, so handling it here gives the children the terminal's SIGINT.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class Running:
    """A command in a process group of its own, its output collected by a thread."""

    def __init__(self, command: List[str]) -> None:
        self.command = command
        default_sigint()
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True,
                                        start_new_session=True)
        self.lines: List[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return ''.join(self.lines)

    def wait_for(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Wait until condition holds (True) or timeout passed or the command ended (False)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline or self.process.poll() is not None:
                return condition()
            time.sleep(0.1)
        return True

    def wait_for_text(self, text: str, timeout: float, count: int = 1) -> bool:
        return self.wait_for(lambda: self.output.count(text) >= count, timeout)

    def group_alive(self) -> bool:
        """Return whether any process of the group still runs (reaping ros2 launch itself)."""
        self.process.poll()
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def interrupt(self, timeout: float = 20.0) -> Tuple[float, bool]:
        """
        Ctrl-C: SIGINT to the group, as a terminal does; wait for every process of it.

        Returns the seconds until the last process ended and whether all ended in timeout.
        """
        started = time.monotonic()
        os.killpg(self.process.pid, signal.SIGINT)
        deadline = started + timeout
        while self.group_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        ended = not self.group_alive()
        seconds = time.monotonic() - started
        self.close()
        return seconds, ended

    def close(self) -> None:
        """Kill what is left of the group and collect the output."""
        if self.group_alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self._reader.join(10)


def launch(file: str, *arguments: str) -> Running:
    """ros2 launch ardupilot_json_bridge <file> <name:=value ...>."""
    return Running(['ros2', 'launch', PACKAGE, file, *arguments])


def start_sitl(instance: int, speedup: float = 1.0):
    """
    Real ArduCopter on instance as the project starts it (copter.parm, then quad_x.parm).

    speedup: 1 keeps SITL to the wall clock; in lock-step a large one (100) leaves it to the
    simulator's steps.

    The one place the ROS 2 tests start SITL (sitl_flight.Sitl underneath).
    """
    import sitl_flight
    return sitl_flight.Sitl(instance=instance, speedup=speedup)


def free_instances(count: int) -> List[int]:
    """
    Return count consecutive SITL instances whose UDP ports (9002 + 10 N) are free.

    Above those of people's own SITLs, and below 256: SITL keeps -I N in a byte.
    """
    import random
    import socket
    while True:
        first = random.randrange(20, 256 - count)
        sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(count)]
        try:
            for instance, sock in zip(range(first, first + count), sockets):
                sock.bind(('127.0.0.1', 9002 + 10 * instance))
            return list(range(first, first + count))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()


def stop(launched: Running, limit: float = 8.0, known: Tuple[str, ...] = (),
         status_lost: str = '') -> str:
    """
    Ctrl-C a launch: every process must end cleanly within limit seconds, no traceback.

    known: words of error lines a process of the launch is known to end with, left out of the
    check (`gz sim` dies of the SIGINT it is sent). status_lost: a command whose exit status
    launch may lose ("Unknown child process pid N, will report returncode 255" for its pid N):
    those two lines are left out too.
    """
    seconds, ended = launched.interrupt()
    output = launched.output
    assert ended and seconds < limit, f'{seconds:.1f} s after Ctrl-C:\n{output[-2000:]}'
    assert 'Traceback' not in output, output[-3000:]
    if status_lost:
        for pid in re.findall(r'Unknown child process pid (\d+), will report returncode 255',
                              output):
            known += (f'Unknown child process pid {pid},',
                      f"[pid {pid}, exit code 255, cmd '{status_lost}")
    checked = ''.join(line for line in launched.lines if not any(k in line for k in known))
    assert 'ERROR' not in checked, output[-3000:]
    print(f'Ctrl-C stopped {" ".join(launched.command[1:4])} in {seconds:.1f} s')
    return output


def stop_recorder(recorder: Running, bag: str, limit: float = 60.0) -> None:
    """
    Ctrl-C `ros2 bag record`; it must end within limit seconds and leave the bag whole.

    rosbag2 writes metadata.yaml only on a clean stop; what was written before a kill is
    kept in the storage file (`ros2 bag reindex` rebuilds the metadata from it).
    """
    seconds, ended = recorder.interrupt(limit)
    if ended and os.path.isfile(os.path.join(bag, 'metadata.yaml')):
        print(f'Ctrl-C stopped ros2 bag record in {seconds:.1f} s')
        return
    tail = ''.join(recorder.lines[-6:])
    state = f'ended in {seconds:.1f} s' if ended else f'still ran {seconds:.0f} s (killed)'
    raise AssertionError(
        f'ros2 bag record {state} after Ctrl-C and left no metadata.yaml in {bag} (left: '
        f'{sorted(os.listdir(bag)) if os.path.isdir(bag) else "nothing"}; `ros2 bag reindex` '
        f'would rebuild it); its last lines:\n{tail}')


def bag_info_counts(bag: str) -> Dict[str, int]:
    """Return {topic: count} as `ros2 bag info` states them (and print what it said)."""
    info = ros2('bag', 'info', bag)
    assert info.returncode == 0, info.stdout
    print(info.stdout)
    return {topic: int(count) for topic, count in
            re.findall(r'Topic: (\S+) \| Type: \S+ \| Count: (\d+)', info.stdout)}


def read_bag(bag: str) -> Dict[str, list]:
    """Return (receive time ns, message) per topic, read by rosbags (not the project's)."""
    from pathlib import Path
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import get_typestore, Stores
    topics: Dict[str, list] = {}
    with AnyReader([Path(bag)], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        wanted = [c for c in reader.connections if c.msgtype != 'actuator_msgs/msg/Actuators']
        for connection, timestamp, raw in reader.messages(connections=wanted):
            topics.setdefault(connection.topic, []).append(
                (timestamp, reader.deserialize(raw, connection.msgtype)))
    return topics


def bag_window(bag: str, out: str, start: float, seconds: float, topics: List[str]) -> str:
    """
    Write the topics' messages logged from start to start + seconds after the bag's start.

    What `ros2 bag play --start-offset --playback-duration` plays, as a bag of its own (MCAP,
    written by rosbags): Humble's ros2 bag play has no --playback-duration. Returns out.
    """
    from pathlib import Path
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import get_typestore, Stores
    store = get_typestore(Stores.ROS2_JAZZY)
    with AnyReader([Path(bag)], default_typestore=store) as reader:
        first = reader.start_time + round(start * 1e9)
        last = first + round(seconds * 1e9)
        wanted = [c for c in reader.connections if c.topic in topics]
        with Writer(Path(out), version=8, storage_plugin=StoragePlugin.MCAP) as writer:
            written = {c.id: writer.add_connection(c.topic, c.msgtype, typestore=store)
                       for c in wanted}
            for connection, timestamp, raw in reader.messages(connections=wanted, start=first,
                                                              stop=last):
                writer.write(written[connection.id], timestamp, raw)
    return out
