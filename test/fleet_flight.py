"""
Real ArduCopters in one MuJoCo world: the engine in this process, one SITL and one pilot each.

Used by test_mujoco_fleet.py and benchmarks/fleet_hover.py. Vehicle k of the quad X fleet is
served on SITL instance first + k (UDP 9002 + 10 (first + k)), as `ardupilot-json-bridge mujoco
--vehicles N --instance first` serves it, and is flown by sitl_flight.fly in a thread of its own
to its own height; MuJoCo's truth is read from the engine's vehicles while SITL reports.
"""

from contextlib import ExitStack
from dataclasses import dataclass, field
import threading
from typing import Dict, List, Optional, Sequence, Tuple

from ardupilot_json_bridge.cli import default_preset, load_config
from ardupilot_json_bridge.core.settings import LinkSettings, SAMPLES, StateSettings
from ardupilot_json_bridge.core.state import SensorState
from ardupilot_json_bridge.link.fleet_server import FleetServer
from ardupilot_json_bridge.link.sitl_link import SitlLink
from ardupilot_json_bridge.sources.compiled_frames import compile_frames
from ardupilot_json_bridge.sources.mujoco_fleet import FleetWorld
from ardupilot_json_bridge.sources.mujoco_source import MujocoLockStep
from ardupilot_json_bridge.sources.mujoco_vehicle import DEFAULT_MODEL, load_world, MujocoVehicle
import sitl_flight

LOG_TAIL = 1500


@dataclass
class FleetFlight:
    """Each vehicle's flight (None: its pilot never returned) and its link's counts."""

    records: List[Optional[sitl_flight.FlightRecord]]
    logs: List[str]
    skipped: List[int] = field(default_factory=list)
    lost: List[int] = field(default_factory=list)
    positions: List[Tuple[float, float, float]] = field(default_factory=list)


def fly_fleet(heights: Sequence[float], speedup: float, hold: float, first: int = 3,
              timeout: float = 240.0, compiled: bool = True) -> FleetFlight:
    """
    Fly len(heights) real ArduCopters at once, vehicle k to heights[k], hovering hold s.

    Each SITL runs at speedup with config/quad_x.parm (sitl_flight.Sitl); positions are the
    vehicles' final truth (ROS ENU, m), for where they ended up in the one world. Plain frames
    are served by the compiled frame loop, as the mujoco command serves them, unless compiled
    is False.
    """
    count = len(heights)
    config = load_config(default_preset('mujoco_quad_x.yaml'), '', {})
    world = load_world(DEFAULT_MODEL, count)
    vehicles = [MujocoVehicle(DEFAULT_MODEL, world, k) for k in range(count)]
    for vehicle in vehicles:
        vehicle.reset()
    fleet = FleetWorld(vehicles, config.link.hold_timeout, first_instance=first)
    links: List[SitlLink] = []
    sources: List[MujocoLockStep] = []
    for index, vehicle in enumerate(vehicles):
        state = SensorState(StateSettings(pacing=SAMPLES))
        sources.append(MujocoLockStep(vehicle, state, config.outputs, world=fleet))
        links.append(SitlLink(LinkSettings(instance=first + index), state,
                              on_frame=sources[-1].on_frame, on_restart=sources[-1].on_restart,
                              after_reply=sources[-1].after_reply))
    server = FleetServer(links, fleet, [source.held_instant for source in sources])
    if compiled:
        blocker = compile_frames(links, sources, server)
        assert blocker is None, blocker
    server.start()
    starts = [vehicle.state().position[2] for vehicle in vehicles]
    records: Dict[int, sitl_flight.FlightRecord] = {}

    def fly(index: int, sitl: sitl_flight.Sitl) -> None:
        records[index] = sitl_flight.fly(
            sitl, heights[index], hold,
            lambda: vehicles[index].state().position[2] - starts[index], timeout=timeout)

    try:
        with ExitStack() as stack:
            sitls = [stack.enter_context(sitl_flight.Sitl(instance=first + k, speedup=speedup))
                     for k in range(count)]
            pilots = [threading.Thread(target=fly, args=(k, sitl), daemon=True)
                      for k, sitl in enumerate(sitls)]
            for pilot in pilots:
                pilot.start()
            for pilot in pilots:
                pilot.join(timeout * 1.7)
            logs = [sitl.log()[-LOG_TAIL:] for sitl in sitls]
    finally:
        server.stop()
        for link in links:
            link.stop()
    return FleetFlight([records.get(k) for k in range(count)], logs,
                       [link.stats.skipped for link in links],
                       [link.stats.lost for link in links],
                       [tuple(vehicle.state().position) for vehicle in vehicles])
