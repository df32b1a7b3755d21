"""
SERVO outputs (PWM, microseconds) to actuator commands, with ardupilot_gazebo's formula.

raw = clamp((pwm - servo_min) / (servo_max - servo_min), 0, 1); command = multiplier *
(raw + offset). PWM 0 means SITL drives nothing on that channel, so the output keeps its last
command.
"""

from dataclasses import dataclass
import enum
from typing import Dict, List, Sequence, Tuple

from ardupilot_json_bridge.compiled._frame import PwmMap, scale_pwm


class OutputKind(enum.Enum):
    """The message a group of outputs is published as."""

    ACTUATORS = 'actuators'                    # actuator_msgs/Actuators
    FLOAT64_MULTI_ARRAY = 'float64_multi_array'  # ros2_control forward controllers
    FLOAT64 = 'float64'                        # one std_msgs/Float64 per joint


class ActuatorField(enum.Enum):
    """The actuator_msgs/Actuators array a group fills."""

    VELOCITY = 'velocity'
    POSITION = 'position'
    NORMALIZED = 'normalized'


@dataclass(frozen=True)
class ChannelScaling:
    """One output's scaling, as in ardupilot_gazebo's <control> element."""

    servo_min: float = 1000.0
    servo_max: float = 2000.0
    multiplier: float = 1.0
    offset: float = 0.0

    def command(self, pwm: float) -> float:
        """Return the command of one PWM value (the frame loop's formula, compiled/_frame.c)."""
        return scale_pwm(pwm, self.servo_min, self.servo_max, self.multiplier, self.offset)


@dataclass(frozen=True)
class OutputGroup:
    """Outputs published together: SERVO channels (1-based) and their scalings, in order."""

    name: str
    kind: OutputKind
    topic: str
    channels: Tuple[int, ...]
    scalings: Tuple[ChannelScaling, ...]
    field: ActuatorField = ActuatorField.VELOCITY
    topics: Tuple[str, ...] = ()
    initial: float = 0.0

    def __post_init__(self) -> None:
        if len(self.scalings) != len(self.channels):
            raise ValueError(f'output group {self.name}: {len(self.channels)} channels but '
                             f'{len(self.scalings)} scalings')


class ActuatorMapper:
    """Turns each frame's PWM into every group's command values, holding PWM-0 outputs."""

    def __init__(self, groups: Sequence[OutputGroup]) -> None:
        self.groups = tuple(groups)
        # Every group's outputs in order, with their held values, as the frame loop maps them.
        self.pwm_map = PwmMap(tuple(
            (channel, s.servo_min, s.servo_max, s.multiplier, s.offset, g.initial)
            for g in self.groups for channel, s in zip(g.channels, g.scalings)))

    def commands(self, pwm: Sequence[int]) -> List[float]:
        """Every group's commands for one frame's PWM (index 0 is SERVO1), in group order."""
        return self.pwm_map.commands(pwm)

    def apply(self, pwm: Sequence[int]) -> Dict[str, Tuple[float, ...]]:
        """Commands of every group for one frame's PWM, by group name."""
        values = self.commands(pwm)
        result = {}
        start = 0
        for group in self.groups:
            end = start + len(group.channels)
            result[group.name] = tuple(values[start:end])
            start = end
        return result
