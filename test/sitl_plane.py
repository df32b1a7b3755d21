"""
Fly real ArduPlane SITL over MAVLink: EKF ready, arm, TAKEOFF, LOITER, RTL; judged by truth.

Starts `arduplane` from ARDUPILOT_SITL_DIR with ArduPilot's plane.parm (sitl_rover's
VehicleSitl); tests skip where it is missing.
"""

from dataclasses import dataclass, field
import math
import time
from typing import Callable, List, Optional, Tuple

import sitl_flight
import sitl_rover

Point3 = Tuple[float, float, float]
# Wall seconds a whole circuit may take in real time.
CIRCUIT_TIMEOUT = 400.0


def plane_binary() -> Optional[str]:
    """Return the prebuilt arduplane, or None where there is none."""
    return sitl_flight.sitl_binary('arduplane')


def plane_sitl(instance: int = 0, speedup: float = 1.0) -> sitl_rover.VehicleSitl:
    """Start ArduPlane with plane.parm."""
    return sitl_rover.VehicleSitl('arduplane', ['plane.parm'], instance, speedup)


@dataclass
class CircuitRecord:
    """What a flight showed: SITL's messages and the truth's track in each phase."""

    texts: List[str] = field(default_factory=list)
    armed: bool = False
    took_off: bool = False
    takeoff: List[Point3] = field(default_factory=list)
    loiter: List[Point3] = field(default_factory=list)
    rtl: List[Point3] = field(default_factory=list)
    wind: List[Tuple[float, float, float]] = field(default_factory=list)
    wall_seconds: float = 0.0


def circle(track: List[Point3]) -> Tuple[float, float, float, float]:
    """Return a track's circle: centre east and north, mean radius, and the radius' spread."""
    east = sum(p[0] for p in track) / len(track)
    north = sum(p[1] for p in track) / len(track)
    radii = [math.hypot(p[0] - east, p[1] - north) for p in track]
    mean = sum(radii) / len(radii)
    return east, north, mean, max(abs(r - mean) for r in radii)


def fly_circuit(sitl: sitl_flight.Sitl, truth: Callable[[], Point3], altitude: float = 50.0,
                loiter_seconds: float = 40.0, rtl_seconds: float = 30.0,
                timeout: float = CIRCUIT_TIMEOUT) -> CircuitRecord:
    """EKF ready, arm, TAKEOFF to altitude, LOITER for loiter_seconds, RTL; sim seconds."""
    started = time.monotonic()
    flight = sitl_flight.Flight(sitl)
    # One deadline for the whole circuit: a SITL that stops sending must not hold every
    # phase for the full timeout in turn.
    finish = started + timeout
    record = CircuitRecord(texts=flight.record.texts)

    def pump_for(seconds: float, into: List[Point3]) -> None:
        begin = flight.boot_ms
        while flight.boot_ms - begin < seconds * 1000 and time.monotonic() < finish:
            message = flight.receive(0.1)
            into.append(truth())
            if message is not None and message.get_type() == 'WIND':
                record.wind.append((message.direction, message.speed, message.speed_z))

    try:
        ready = flight.wait_ready(timeout / 3)
        if not ready:
            return record
        flight.pump(5.0)
        record.armed = flight.arm(60.0, 'MANUAL')
        if not record.armed:
            return record
        flight.set_mode('TAKEOFF')
        deadline = time.monotonic() + timeout / 3
        while time.monotonic() < min(deadline, finish):
            pump_for(0.5, record.takeoff)
            if record.takeoff and record.takeoff[-1][2] > altitude - 2.0:
                record.took_off = True
                break
        if not record.took_off:
            return record
        pump_for(5.0, record.takeoff)
        flight.set_mode('LOITER')
        pump_for(loiter_seconds, record.loiter)
        flight.set_mode('RTL')
        pump_for(rtl_seconds, record.rtl)
    finally:
        record.wall_seconds = time.monotonic() - started
        flight.close()
    return record
