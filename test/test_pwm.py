"""PWM to actuator commands with ardupilot_gazebo's formula."""

import pytest

from ardupilot_json_bridge.core.pwm import ActuatorMapper, ChannelScaling, OutputGroup, OutputKind


@pytest.mark.parametrize('scaling,pwm,command', [
    (ChannelScaling(), 1000, 0.0),
    (ChannelScaling(), 1500, 0.5),
    (ChannelScaling(), 2000, 1.0),
    (ChannelScaling(), 900, 0.0),
    (ChannelScaling(), 2100, 1.0),
    (ChannelScaling(1100, 1900, 838.0), 1500, 419.0),
    (ChannelScaling(1100, 1900, -838.0), 1900, -838.0),
    (ChannelScaling(1000, 2000, 1.0, -0.5), 1500, 0.0),
    (ChannelScaling(1000, 2000, 2.0, -0.5), 1000, -1.0),
])
def test_formula(scaling, pwm, command):
    assert scaling.command(pwm) == pytest.approx(command)


def group(name='motors', channels=(1, 2, 3, 4), initial=0.0):
    return OutputGroup(name, OutputKind.ACTUATORS, 'command', tuple(channels),
                       tuple(ChannelScaling(1100, 1900, 838.0) for _ in channels),
                       initial=initial)


def test_groups_take_their_channels_in_order():
    mapper = ActuatorMapper([group(channels=(3, 1)), group('tail', channels=(16,))])
    values = mapper.apply([1900, 1100, 1500] + [0] * 12 + [1500])
    assert values == {'motors': pytest.approx((419.0, 838.0)), 'tail': pytest.approx((419.0,))}


def test_pwm_zero_leaves_the_output_untouched():
    mapper = ActuatorMapper([group(initial=5.0)])
    assert mapper.apply([0] * 16)['motors'] == (5.0, 5.0, 5.0, 5.0)
    mapper.apply([1900] * 4 + [0] * 12)
    assert mapper.apply([0, 1100, 0, 0] + [0] * 12)['motors'] == pytest.approx(
        (838.0, 0.0, 838.0, 838.0))


def test_channel_beyond_the_packet_is_untouched():
    mapper = ActuatorMapper([group(channels=(20,), initial=1.0)])
    assert mapper.apply([1900] * 16)['motors'] == (1.0,)
    assert mapper.apply([1900] * 32)['motors'] == pytest.approx((838.0,))


def test_scalings_must_match_channels():
    with pytest.raises(ValueError, match='2 channels but 1 scalings'):
        OutputGroup('bad', OutputKind.FLOAT64, '', (1, 2), (ChannelScaling(),))
