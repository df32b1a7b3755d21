"""Output messages built with the real ROS classes (rosbags) and serialized to prove them."""

import numpy as np
import pytest
from rosbags.typesys import get_types_from_msg

from ardupilot_json_bridge.core.pwm import ActuatorField, ChannelScaling, OutputGroup, OutputKind
from ardupilot_json_bridge.messages.commands import (
    group_messages, group_topics, MessageClasses, time_message)
import ros_messages as msgs

ACTUATORS = 'actuator_msgs/msg/Actuators'
ACTUATORS_MSG = """std_msgs/Header header
float64[] position
float64[] velocity
float64[] normalized
"""


def classes_for(store):
    if ACTUATORS not in store.types:
        store.register(get_types_from_msg(ACTUATORS_MSG, ACTUATORS))
    types = store.types
    return MessageClasses(
        time=types['builtin_interfaces/msg/Time'], header=types['std_msgs/msg/Header'],
        float64=types['std_msgs/msg/Float64'],
        float64_multi_array=types['std_msgs/msg/Float64MultiArray'],
        multi_array_layout=types['std_msgs/msg/MultiArrayLayout'],
        actuators=types[ACTUATORS],
        float_array=lambda values: np.asarray(values, dtype=np.float64))


@pytest.fixture(params=sorted(msgs.STORES))
def store(request):
    return msgs.STORES[request.param]


def round_trip(store, message):
    typename = message.__msgtype__
    return store.deserialize_cdr(store.serialize_cdr(message, typename), typename)


def group(kind, channels=(1, 2), topic='out', topics=(), field=ActuatorField.VELOCITY):
    return OutputGroup('g', kind, topic, channels, tuple(ChannelScaling() for _ in channels),
                       field=field, topics=topics)


@pytest.mark.parametrize('field', list(ActuatorField))
def test_actuators_fill_one_array(store, field):
    classes = classes_for(store)
    ((topic, message),) = group_messages(classes, group(OutputKind.ACTUATORS, field=field),
                                         (1.5, 2.5), 12.25, 'base_link')
    back = round_trip(store, message)
    assert topic == 'out'
    assert (back.header.stamp.sec, back.header.stamp.nanosec) == (12, 250000000)
    assert back.header.frame_id == 'base_link'
    for name in ('position', 'velocity', 'normalized'):
        expected = [1.5, 2.5] if name == field.value else []
        assert list(getattr(back, name)) == expected


def test_multi_array_has_exactly_the_joint_count(store):
    classes = classes_for(store)
    ((topic, message),) = group_messages(
        classes, group(OutputKind.FLOAT64_MULTI_ARRAY, channels=(3, 3, 3, 3),
                       topic='wheels/commands'), (1.0, 2.0, 3.0, 4.0), 0.0)
    back = round_trip(store, message)
    assert topic == 'wheels/commands'
    assert list(back.data) == [1.0, 2.0, 3.0, 4.0]


def test_float64_one_topic_per_channel(store):
    classes = classes_for(store)
    out = group(OutputKind.FLOAT64, topics=('servo/aileron', 'servo/elevator'))
    pairs = group_messages(classes, out, (0.25, -0.5), 0.0)
    assert [(t, round_trip(store, m).data) for t, m in pairs] == [
        ('servo/aileron', 0.25), ('servo/elevator', -0.5)]
    assert group_topics(out) == ('servo/aileron', 'servo/elevator')


@pytest.mark.parametrize('seconds,sec,nanosec', [
    (0.0, 0, 0), (1.5, 1, 500000000),
    (2.9999999999, 3, 0),  # the nearest nanosecond is the next second's first
    (2.9999999994, 2, 999999999), (1e9 + 0.25, 10**9, 250000000)])
def test_time_message(store, seconds, sec, nanosec):
    stamp = time_message(classes_for(store), seconds)
    assert (stamp.sec, stamp.nanosec) == (sec, nanosec)
