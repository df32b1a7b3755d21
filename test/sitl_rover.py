"""
Drive real ArduRover SITL over MAVLink: a mission uploaded, AUTO, armed, driven and judged.

Starts `ardurover` (or `arduplane`) from ARDUPILOT_SITL_DIR with ArduPilot's defaults files
(rover.parm, and rover-skid.parm for the skid-steer frame), as sitl_flight.Sitl starts
ArduCopter; tests skip where it is missing.
"""

from dataclasses import dataclass, field
import math
import os
import tempfile
import time
from typing import Callable, List, Optional, Sequence, Tuple

import sitl_flight

Point = Tuple[float, float]
EARTH_RADIUS = 6378137.0            # WGS-84, as ArduPilot's Location offsets use
# Wall seconds a whole square may take in real time.
SQUARE_TIMEOUT = 300.0


class VehicleSitl(sitl_flight.Sitl):
    """A prebuilt SITL (ardurover, arduplane) with ArduPilot's defaults files, against JSON."""

    def __init__(self, binary_name: str, parms: Sequence[str], instance: int = 0,
                 speedup: float = 1.0) -> None:
        binary = sitl_flight.sitl_binary(binary_name)
        if binary is None:
            raise RuntimeError(f'set {sitl_flight.SITL_DIR_VARIABLE} to a folder with '
                               f'{binary_name}')
        defaults = ','.join(os.path.join(os.path.dirname(binary), name) for name in parms)
        self._start(tempfile.mkdtemp(prefix=f'sitl-{binary_name}-'),
                    sitl_flight.json_sitl_command(binary, instance, speedup, defaults),
                    5760 + 10 * instance)


def rover_sitl(instance: int = 0, speedup: float = 1.0,
               skid: bool = False) -> VehicleSitl:
    """Start ArduRover with rover.parm, and rover-skid.parm for the skid-steer frame."""
    parms = ['rover.parm'] + (['rover-skid.parm'] if skid else [])
    return VehicleSitl('ardurover', parms, instance, speedup)


@dataclass
class DriveRecord:
    """What a mission showed: SITL's messages, waypoints reached, and the truth's track."""

    texts: List[str] = field(default_factory=list)
    reached: List[int] = field(default_factory=list)
    track: List[Point] = field(default_factory=list)
    armed: bool = False
    finished: bool = False
    wall_seconds: float = 0.0


def turn_margin(wp_radius: float, wp_speed: float, turn_max_g: float = 0.6) -> float:
    """
    How far from a waypoint the rover may still be turning onto or off a leg, in metres.

    ArduRover starts the next leg WP_RADIUS before the waypoint and turns at no more than
    TURN_MAX_G (0.6 g by default): a circle of radius WP_SPEED^2 / (TURN_MAX_G g).
    """
    return wp_radius + wp_speed ** 2 / (turn_max_g * 9.80665)


def cross_track_errors(track: Sequence[Point], corners: Sequence[Point],
                       margin: float) -> List[float]:
    """
    Distance of each track point from the nearest leg it is beside, away from the legs' ends.

    A point is beside leg a-b while it lies between a and b along the leg, more than margin
    from both; however far it strays across, its error is its distance from the nearest such
    leg (a point beside no leg is at a corner, judged by worst_path_distance).
    """
    legs = []
    for (ax, ay), (bx, by) in zip(corners, corners[1:]):
        length = math.hypot(bx - ax, by - ay)
        legs.append((ax, ay, (bx - ax) / length, (by - ay) / length, length))
    errors = []
    for x, y in track:
        beside = [abs(-(x - ax) * uy + (y - ay) * ux) for ax, ay, ux, uy, length in legs
                  if margin < (x - ax) * ux + (y - ay) * uy < length - margin]
        if beside:
            errors.append(min(beside))
    return errors


def upload_square(flight: sitl_flight.Flight, side: float) -> List[Point]:
    """
    Upload a square mission (east, north, west, home); return its corners (east, north).

    The MuJoCo vehicles start facing east (ENU x), so the first leg needs no turn.
    """
    mav, mavlink = flight.mav, flight.mavutil.mavlink
    home = mav.recv_match(type='GLOBAL_POSITION_INT', blocking=True, timeout=30)
    lat, lon = home.lat / 1e7, home.lon / 1e7
    corners = [(0.0, 0.0), (side, 0.0), (side, side), (0.0, side), (0.0, 0.0)]
    items = []
    for seq, (east, north) in enumerate(corners):
        item_lat = lat + math.degrees(north / EARTH_RADIUS)
        item_lon = lon + math.degrees(east / (EARTH_RADIUS * math.cos(math.radians(lat))))
        items.append((seq, int(item_lat * 1e7), int(item_lon * 1e7)))
    mav.mav.mission_count_send(mav.target_system, mav.target_component, len(items))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        message = mav.recv_match(type=['MISSION_REQUEST', 'MISSION_REQUEST_INT', 'MISSION_ACK'],
                                 blocking=True, timeout=5)
        if message is None:
            continue
        if message.get_type() == 'MISSION_ACK':
            if message.type != mavlink.MAV_MISSION_ACCEPTED:
                raise RuntimeError(f'mission refused: MISSION_ACK type {message.type}')
            return corners
        seq, item_lat, item_lon = items[message.seq]
        mav.mav.mission_item_int_send(
            mav.target_system, mav.target_component, seq, mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT,
            mavlink.MAV_CMD_NAV_WAYPOINT, 0, 1, 0, 0, 0, 0, item_lat, item_lon, 0)
    raise RuntimeError('the mission upload got no MISSION_ACK within 30 s')


def drive_square(sitl: sitl_flight.Sitl, side: float, truth: Callable[[], Point],
                 timeout: float = SQUARE_TIMEOUT) -> Tuple[DriveRecord, List[Point]]:
    """EKF ready, upload the square, arm, AUTO; sample truth (east, north) until home."""
    started = time.monotonic()
    flight = sitl_flight.Flight(sitl)
    record = DriveRecord(texts=flight.record.texts)
    corners: List[Point] = []
    try:
        ready = flight.wait_ready(timeout / 3)
        if not ready:
            return record, corners
        corners = upload_square(flight, side)
        record.armed = flight.arm(timeout / 4, 'HOLD')
        if not record.armed:
            return record, corners
        flight.set_mode('AUTO')
        last = len(corners) - 1
        while time.monotonic() - started < timeout:
            message = flight.receive(0.05)
            record.track.append(truth())
            if message is None:
                continue
            if message.get_type() == 'MISSION_ITEM_REACHED' and message.seq not in record.reached:
                record.reached.append(message.seq)
                if message.seq == last:
                    record.finished = True
                    break
        flight.pump(3.0)
        record.track.append(truth())
    finally:
        record.wall_seconds = time.monotonic() - started
        flight.close()
    return record, corners


def worst_path_distance(track: Sequence[Point], corners: Sequence[Point]) -> float:
    """Return how far the track strays from the square's sides at worst, corners too."""
    def distance(x: float, y: float) -> float:
        best = math.inf
        for (ax, ay), (bx, by) in zip(corners, corners[1:]):
            dx, dy = bx - ax, by - ay
            t = max(0.0, min(1.0, ((x - ax) * dx + (y - ay) * dy) / (dx * dx + dy * dy)))
            best = min(best, math.hypot(x - ax - t * dx, y - ay - t * dy))
        return best
    return max(distance(x, y) for x, y in track) if track else math.inf


def nearest(track: Sequence[Point], point: Point) -> float:
    """Return the track's closest approach to a point."""
    return min(math.hypot(x - point[0], y - point[1]) for x, y in track) if track else math.inf


def rover_binary() -> Optional[str]:
    """Return the prebuilt ardurover, or None where there is none."""
    return sitl_flight.sitl_binary('ardurover')
