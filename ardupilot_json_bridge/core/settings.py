"""
Settings of the link and the state: plain dataclasses any layer may import.

Kept apart from the runtime modules so configuration, diagnostics and launch files read them
without importing sockets, threads or numpy.
"""

from dataclasses import dataclass

SITL_BASE_PORT = 9002
SITL_PORT_STRIDE = 10
MAX_PORT = 65535
# The last SITL instance whose port exists: 9002 + 10 x 5653 = 65532.
MAX_INSTANCE = (MAX_PORT - SITL_BASE_PORT) // SITL_PORT_STRIDE
# The most vehicles one fleet serves (launch files, the engine, mujoco-sim).
MAX_FLEET = 64
# The most samples a second a free-running source publishes or polls (Hz).
MAX_RATE = 10000.0
# Pacings of SensorState (see state.py).
GRID = 'grid'
SAMPLES = 'samples'


def sitl_port(instance: int) -> int:
    """Return the UDP port SITL instance -I N sends its servo packets to."""
    return SITL_BASE_PORT + SITL_PORT_STRIDE * instance


@dataclass(frozen=True)
class LinkSettings:
    """
    Where to listen and how patient to be (seconds of wall time).

    peer_timeout: when a stranger may take over the port; hold_timeout: how long a lock-step
    fleet's world waits for a silent SITL (below SITL's 1.1 s resend interval).
    """

    instance: int = 0
    bind_address: str = '127.0.0.1'
    port: int = 0
    fresh_timeout: float = 0.5
    peer_timeout: float = 2.0
    hold_timeout: float = 0.5
    no_time_sync: bool = False
    no_lockstep: bool = False

    @property
    def listen_port(self) -> int:
        """Return the configured port, or SITL's default for the instance when port is 0."""
        return self.port or sitl_port(self.instance)


@dataclass(frozen=True)
class StateSettings:
    """
    How the state aligns and judges its inputs (seconds of physics time).

    pacing is GRID for free-running sources and SAMPLES for lock-step ones; horizon is how
    far an instant may lie past the newest primary sample and still be answered, by
    extrapolation, without waiting.
    """

    odometry_only: bool = False
    max_odometry_lag: float = 0.25
    max_optional_age: float = 1.0
    max_backlog: float = 0.05
    horizon: float = 0.0
    rangefinder_count: int = 0
    pacing: str = GRID
