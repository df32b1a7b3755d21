"""Meters and latency windows given a batch at once, as the compiled frame loop gives them."""

from collections import deque
import math

import pytest

from ardupilot_json_bridge.core.stats import InputMeter, LatencyWindow


@pytest.mark.parametrize('size,batches', [
    (8, [3, 3, 1]),        # fits, then ends on the window's edge
    (8, [5, 6]),           # the second wraps around
    (8, [20]),             # more than the window: only the newest 8 count
    (8, [7, 0, 9, 2]),     # an empty batch, then more than the window from the middle
    (2048, [32] * 70),     # SITL's batches of 32, around the real window more than once
])
def test_a_latency_window_extended_holds_the_newest_values(size, batches):
    window = LatencyWindow(size)
    newest = deque(maxlen=size)  # the reference: the newest size values, nothing else
    value = 0.0
    for count in batches:
        values = [value + k for k in range(count)]
        value += count
        window.extend(values)
        newest.extend(values)
        ordered = sorted(newest)
        for fraction in (0.0, 0.5, 0.99, 1.0):
            expected = (ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
                        if ordered else None)
            assert window.percentile(fraction) == expected, (count, fraction)


def test_a_meter_given_a_batch_counts_every_message_evenly_spaced():
    # 1 message, then 32 at once whose newest came 32 ms later: 33 messages, one every ms.
    meter = InputMeter('imu')
    meter.record(10.0)
    meter.record(10.032, 32)
    assert meter.count == 33
    assert meter.last_arrival == 10.032
    assert meter.rate() == pytest.approx(1000.0)
    # A second batch at half the rate moves the smoothed rate as one interval of 2 ms would.
    meter.record(10.096, 32)
    assert meter.count == 65
    single = InputMeter('imu')
    for arrival in (10.0, 10.001, 10.003):
        single.record(arrival)
    assert meter.rate() == pytest.approx(single.rate())
    assert math.isfinite(meter.rate())
