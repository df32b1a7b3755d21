"""
Actuator command messages for each output group, built from any set of ROS classes.

The node passes rclpy's message classes, the tests rosbags' ones, so construction is checked
here without ROS. Every field is given by keyword, as both kinds of class accept.
"""

from dataclasses import dataclass
from typing import Any, Callable, List, Sequence, Tuple

from ardupilot_json_bridge.core.pwm import ActuatorField, OutputGroup, OutputKind
from ardupilot_json_bridge.messages.inputs import time_parts


@dataclass(frozen=True)
class MessageClasses:
    """
    The message classes (and array constructors) commands are built from.

    actuators is None where actuator_msgs is not installed.
    """

    time: Any
    header: Any
    float64: Any
    float64_multi_array: Any
    multi_array_layout: Any
    actuators: Any
    float_array: Callable[[Sequence[float]], Any]


def time_message(classes: MessageClasses, seconds: float) -> Any:
    """builtin_interfaces/Time of a time in seconds (inputs.time_parts: the nearest ns)."""
    sec, nanosec = time_parts(seconds)
    return classes.time(sec=sec, nanosec=nanosec)


def actuators_message(classes: MessageClasses, field: ActuatorField, values: Sequence[float],
                      stamp: float, frame_id: str = '') -> Any:
    """actuator_msgs/Actuators with values in one of its three arrays."""
    arrays = {f.value: classes.float_array(()) for f in ActuatorField}
    arrays[field.value] = classes.float_array(values)
    header = classes.header(stamp=time_message(classes, stamp), frame_id=frame_id)
    return classes.actuators(header=header, **arrays)


def multi_array_message(classes: MessageClasses, values: Sequence[float]) -> Any:
    """std_msgs/Float64MultiArray with exactly the group's values, as forward controllers want."""
    layout = classes.multi_array_layout(dim=[], data_offset=0)
    return classes.float64_multi_array(layout=layout, data=classes.float_array(values))


def group_messages(classes: MessageClasses, group: OutputGroup, values: Sequence[float],
                   stamp: float, frame_id: str = '') -> List[Tuple[str, Any]]:
    """(topic, message) pairs that publish one group's command values (stamped where typed)."""
    if group.kind is OutputKind.ACTUATORS:
        return [(group.topic, actuators_message(classes, group.field, values, stamp,
                                                frame_id))]
    if group.kind is OutputKind.FLOAT64_MULTI_ARRAY:
        return [(group.topic, multi_array_message(classes, values))]
    return [(topic, classes.float64(data=float(value)))
            for topic, value in zip(group.topics, values)]


def group_topics(group: OutputGroup) -> Tuple[str, ...]:
    """Every topic a group publishes on."""
    return group.topics if group.kind is OutputKind.FLOAT64 else (group.topic,)
