"""
Fly real ArduCopter SITL over MAVLink: EKF ready, GUIDED, arm, take off, hover, land.

Used by the tests where ARDUPILOT_SITL_DIR names a folder with a prebuilt `arducopter` and its
`copter.parm` (CI sets it when ../shared has them); elsewhere those tests skip. SITL starts as
a quad X (the project's config/quad_x.parm after copter.parm, whose FRAME_TYPE 0 is a PLUS).
A SITL that dies ends the flight at once with SitlDied: its exit status and its last lines.
"""

import contextlib
from dataclasses import dataclass, field
import glob
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

SITL_DIR_VARIABLE = 'ARDUPILOT_SITL_DIR'
QUAD_X_DEFAULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'config',
                               'quad_x.parm')
TAIL_LINES = 15
# Wall seconds a whole flight may take in real time (each stage gets a share of it).
FLIGHT_TIMEOUT = 240.0
# Simulators that run free through ROS (mujoco_sim, not in lock-step with SITL) run at half the
# wall clock in the tests, as the README advises for a small or busy machine: in real time, a
# 2-core machine running another CPU-bound job starved SITL (a gyro-rate arming failure, a crash
# on AngErr, a 4.9 m hover error at 1 kHz, a plane loitering 5.2 m off its altitude).
REAL_TIME_FACTOR = 0.5
PACED = f'real_time_factor:={REAL_TIME_FACTOR}'   # a parameter (-p) or a launch argument


CPU_HOG = 'while 1: pass'


@contextlib.contextmanager
def cpu_hogs(count: int) -> Iterator[List[subprocess.Popen]]:
    """Run count CPU-bound processes beside a flight; kill them on the way out."""
    hogs = [subprocess.Popen([sys.executable, '-c', CPU_HOG]) for _ in range(count)]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


class SitlDied(RuntimeError):
    """SITL exited or closed MAVLink during a flight; the message says how, in a few lines."""


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """Return the last lines of text, saying how many were left out: for failure messages."""
    kept = text.splitlines()
    if len(kept) <= lines:
        return '\n'.join(kept)
    return '\n'.join([f'[{len(kept) - lines} earlier lines left out]'] + kept[-lines:])


def instance(number: int) -> int:
    """Return SITL instance number moved by SITL_INSTANCE_OFFSET: two suites side by side."""
    return number + int(os.environ.get('SITL_INSTANCE_OFFSET', '0'))


def sitl_binary(name: str = 'arducopter') -> Optional[str]:
    """Return the prebuilt SITL binary, or None where there is none."""
    folder = os.environ.get(SITL_DIR_VARIABLE, '')
    path = os.path.join(folder, name)
    return path if folder and os.access(path, os.X_OK) else None


def json_sitl_command(binary: str, instance: int, speedup: float, defaults: str,
                      backend: str = '127.0.0.1') -> List[str]:
    """Return the command line of a prebuilt SITL against a JSON backend at backend."""
    return [binary, '--model', f'JSON:{backend}', '--speedup', str(speedup), '-I', str(instance),
            '--serial0', 'tcp:0', '--defaults', defaults, '--wipe']


def stopped(process: subprocess.Popen) -> str:
    """Terminate a process (kill it if it will not go) and return its output."""
    process.terminate()
    try:
        return process.communicate(timeout=20)[0]
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()[0] + '\n(did not stop on SIGTERM: killed)'


class Sitl:
    """
    ArduCopter SITL against a JSON backend (on 127.0.0.1 unless told), in a scratch folder.

    prefix goes before SITL's command line: another host's `ip netns exec NAME` (netns_hosts).
    """

    def __init__(self, instance: int = 0, speedup: float = 1.0,
                 extra_parameters: str = '', backend: str = '127.0.0.1',
                 prefix: Sequence[str] = ()) -> None:
        binary = sitl_binary()
        if binary is None:
            raise RuntimeError(f'set {SITL_DIR_VARIABLE} to a folder with arducopter')
        folder = tempfile.mkdtemp(prefix='sitl-')
        defaults = os.path.join(os.path.dirname(binary), 'copter.parm') + ',' + os.path.normpath(
            QUAD_X_DEFAULTS)
        if extra_parameters:
            extra = os.path.join(folder, 'extra.parm')
            with open(extra, 'w') as stream:
                stream.write(extra_parameters)
            defaults += ',' + extra
        self._start(folder, [*prefix, *json_sitl_command(binary, instance, speedup, defaults,
                                                         backend)],
                    5760 + 10 * instance)

    def _start(self, folder: str, command: List[str], mavlink_port: int) -> None:
        """Run command in folder (removed on close), its output to sitl.log there."""
        self.folder = folder
        self.log_path = os.path.join(folder, 'sitl.log')
        self._log = open(self.log_path, 'w')
        self.process = subprocess.Popen(command, cwd=folder, stdout=self._log,
                                        stderr=subprocess.STDOUT)
        self.mavlink_port = mavlink_port

    def log(self) -> str:
        self._log.flush()
        with open(self.log_path, errors='replace') as stream:
            return stream.read()

    def failure(self, what: str, wait: float = 5.0) -> str:
        """Describe SITL's end in a few lines: what was seen, its exit status, its last lines."""
        try:
            status = self.process.wait(wait)
        except subprocess.TimeoutExpired:
            ending = f'SITL (pid {self.process.pid}) {what} but still runs'
        else:
            ending = f'SITL {what}: exited with status {status}'
            if status < 0:
                ending += f' ({signal.Signals(-status).name})'
        return f'{ending}; its last output ({self.log_path}):\n{tail(self.log())}'

    def check_alive(self) -> None:
        """Raise SitlDied if SITL has exited."""
        if self.process.poll() is not None:
            raise SitlDied(self.failure('died during the flight'))

    def figures(self) -> Tuple[Optional[float], Optional[float], int]:
        """
        Return SITL's own figures, from its newest dataflash log.

        The median gyro sample rate (Hz, IMU.GHz), the median main loop rate (Hz, PM.LR) and
        the count of long loops (PM.NLon).
        """
        from pymavlink import DFReader
        logs = sorted(glob.glob(os.path.join(self.folder, 'logs', '*.BIN')),
                      key=os.path.getmtime)
        if not logs:
            return None, None, 0
        reader = DFReader.DFReader_binary(logs[-1], zero_time_base=True)
        gyro, loop, long_loops = [], [], 0
        while True:
            message = reader.recv_match(type=['IMU', 'PM'])
            if message is None:
                break
            if message.get_type() == 'IMU' and getattr(message, 'I', 0) == 0:
                gyro.append(message.GHz)
            elif message.get_type() == 'PM':
                loop.append(getattr(message, 'LR', 0))
                long_loops += message.NLon
        return (statistics.median(gyro) if gyro else None,
                statistics.median(loop) if loop else None, long_loops)

    def close(self) -> None:
        if self.process.poll() is None:
            # SITL waiting for a physics reply does not act on SIGTERM; it gets 3 s.
            self.process.terminate()
            try:
                self.process.wait(3)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> 'Sitl':
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


@dataclass
class FlightRecord:
    """What a flight showed: SITL's messages and (sim time s, altitude m, truth m) samples."""

    texts: List[str] = field(default_factory=list)
    hover: List[Tuple[float, float, float]] = field(default_factory=list)
    armed: bool = False
    reached: bool = False
    landed: bool = False
    moved: bool = False
    wall_seconds: float = 0.0
    sim_seconds: float = 0.0
    hover_wall_seconds: float = 0.0

    @property
    def frame(self) -> Optional[str]:
        """Return SITL's "Frame: ..." boot message (the motor layout it mixes for), if it came."""
        return next((text for text in self.texts if text.startswith('Frame: ')), None)

    def worst_hover_error(self, altitude: float) -> float:
        return max(abs(alt - altitude) for _, alt, _ in self.hover)

    def worst_truth_error(self) -> float:
        return max(abs(alt - truth) for _, alt, truth in self.hover)


class Flight:
    """A MAVLink session with one SITL instance; SitlDied as soon as SITL is gone."""

    def __init__(self, sitl: Sitl, timeout: float = 60.0) -> None:
        from pymavlink import mavutil
        self.mavutil = mavutil
        self.sitl = sitl
        deadline = time.monotonic() + timeout
        while True:
            sitl.check_alive()
            try:
                self.mav = mavutil.mavlink_connection(f'tcp:127.0.0.1:{sitl.mavlink_port}',
                                                      source_system=255, autoreconnect=False)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        # pymavlink prints "EOF on TCP socket" and carries on, in a tight loop, once the peer
        # is gone: a dead SITL must end the flight instead.
        self.mav.handle_eof = self._gone
        self.mav.handle_disconnect = self._gone
        self.record = FlightRecord()
        if not self.mav.wait_heartbeat(timeout=timeout):
            sitl.check_alive()
            raise TimeoutError(f'no HEARTBEAT from SITL in {timeout:.0f} s')
        self.boot_ms = 0
        self.relative_alt = 0.0
        self.north = 0.0
        self.ekf_flags = 0
        self.origin_set = False
        self.mav.mav.request_data_stream_send(
            self.mav.target_system, self.mav.target_component,
            mavutil.mavlink.MAV_DATA_STREAM_ALL, 20, 1)
        # The banner (firmware, "Frame: QUAD/X") went out at boot, before this connection.
        self.mav.mav.command_long_send(self.mav.target_system, self.mav.target_component,
                                       mavutil.mavlink.MAV_CMD_DO_SEND_BANNER, 0,
                                       0, 0, 0, 0, 0, 0, 0)

    def _gone(self) -> None:
        raise SitlDied(self.sitl.failure('closed its MAVLink connection'))

    def receive(self, timeout: float):
        """
        Return the next MAVLink message within timeout s (None if none came); SitlDied if gone.

        Keeps what every flight needs: SITL's STATUSTEXT in record.texts, the EKF flags and
        origin, the altitude, north and SITL's boot time.
        """
        try:
            message = self.mav.recv_match(blocking=True, timeout=timeout)
        except OSError as error:
            raise SitlDied(self.sitl.failure(f'MAVLink failed ({error})')) from None
        if message is None:
            self.sitl.check_alive()
            return None
        kind = message.get_type()
        if kind == 'STATUSTEXT':
            self.record.texts.append(message.text)
            if 'origin set' in message.text.lower():
                self.origin_set = True
        elif kind == 'GPS_GLOBAL_ORIGIN':
            self.origin_set = True   # asked for by wait_ready: the text may be long gone
        elif kind == 'EKF_STATUS_REPORT':
            self.ekf_flags = message.flags
        elif kind == 'GLOBAL_POSITION_INT':
            self.relative_alt = message.relative_alt / 1000.0
            self.boot_ms = max(self.boot_ms, message.time_boot_ms)
        elif kind == 'LOCAL_POSITION_NED':
            self.north = message.x
        elif kind == 'SYSTEM_TIME':
            self.boot_ms = max(self.boot_ms, message.time_boot_ms)
        return message

    def pump(self, seconds: float) -> None:
        """Read messages for seconds of wall time, keeping what the flight needs."""
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self.receive(min(remaining, 0.2))

    def wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                return False
            self.pump(0.2)
        return True

    def wait_ready(self, timeout: float) -> bool:
        """Wait for the EKF origin and flags 0x1F: attitude, velocities, horizontal position."""
        # A fast SITL sets its origin before this connection hears "origin set": ask for it.
        mavlink = self.mavutil.mavlink
        self.mav.mav.command_long_send(self.mav.target_system, self.mav.target_component,
                                       mavlink.MAV_CMD_REQUEST_MESSAGE, 0,
                                       mavlink.MAVLINK_MSG_ID_GPS_GLOBAL_ORIGIN, 0, 0, 0, 0, 0,
                                       0)
        return self.wait(lambda: self.ekf_flags & 0x1F == 0x1F and self.origin_set, timeout)

    def set_mode(self, mode: str) -> None:
        self.mav.set_mode(self.mav.mode_mapping()[mode])

    def arm(self, timeout: float, mode: str = 'GUIDED') -> bool:
        """Arm in mode, asking again each second until timeout s; True once armed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.set_mode(mode)
            self.mav.arducopter_arm()
            self.pump(1.0)
            if self.mav.motors_armed():
                return True
        return False

    def takeoff(self, altitude: float) -> None:
        mavlink = self.mavutil.mavlink
        self.mav.mav.command_long_send(self.mav.target_system, self.mav.target_component,
                                       mavlink.MAV_CMD_NAV_TAKEOFF, 0, 0, 0, 0, 0, 0, 0,
                                       altitude)

    def go_north(self, distance: float, altitude: float) -> None:
        """Fly to distance m north of the EKF origin at altitude (GUIDED position target)."""
        mavlink = self.mavutil.mavlink
        positions_only = 0b110111111000
        self.mav.mav.set_position_target_local_ned_send(
            0, self.mav.target_system, self.mav.target_component, mavlink.MAV_FRAME_LOCAL_NED,
            positions_only, distance, 0.0, -altitude, 0, 0, 0, 0, 0, 0, 0, 0)

    def close(self) -> None:
        self.mav.close()


def fly(sitl: Sitl, altitude: float, hold: float, truth: Callable[[], float],
        timeout: float = FLIGHT_TIMEOUT, leg: float = 0.0,
        connect: Callable[[Sitl], Flight] = Flight,
        hover: Callable[[bool], None] = lambda starts: None) -> FlightRecord:
    """
    EKF ready, GUIDED, arm, take off to altitude, hold for hold s of sim time, land.

    With leg, fly leg m north after the hold (moved says it got there), then land. hover is
    told True when the hold starts and False when it ends (a faulty wire's faults then).

    truth gives the simulator's own height above its start, sampled with SITL's altitude;
    connect opens the MAVLink session (SITL on another host: from inside that host).
    Raises SitlDied when SITL exits or closes MAVLink.
    """
    started = time.monotonic()
    flight = connect(sitl)
    record = flight.record
    try:
        ready = flight.wait_ready(timeout / 2)
        if not ready:
            return record
        record.armed = flight.arm(timeout / 4)
        if not record.armed:
            return record
        flight.takeoff(altitude)
        record.reached = flight.wait(lambda: flight.relative_alt > altitude - 0.3, timeout / 4)
        if not record.reached:
            return record
        flight.pump(2.0)
        hover(True)
        begin, hover_started = flight.boot_ms, time.monotonic()
        while flight.boot_ms - begin < hold * 1000 and time.monotonic() - started < timeout:
            flight.pump(0.05)
            record.hover.append((flight.boot_ms / 1000.0, flight.relative_alt, truth()))
        record.sim_seconds = (flight.boot_ms - begin) / 1000.0
        record.hover_wall_seconds = time.monotonic() - hover_started
        hover(False)
        if leg:
            flight.go_north(leg, altitude)
            record.moved = flight.wait(lambda: flight.north > leg - 0.5, timeout / 4)
        flight.set_mode('LAND')
        record.landed = flight.wait(lambda: not flight.mav.motors_armed(), timeout / 4)
    finally:
        record.wall_seconds = time.monotonic() - started
        flight.close()
    return record
