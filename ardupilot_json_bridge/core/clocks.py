"""
Which clock a stamp was taken from, and what to say when two inputs' clocks disagree.

A simulator stamps with its physics time; a node without use_sim_time stamps with the wall
clock (seconds since 1970). Stamps within a day of the wall clock are taken to come from it.
"""

# Stamps this close to the wall clock (s, a day) come from it; further apart, clocks differ.
CLOCK_MISMATCH = 86400.0
# One instant as two sides compute it (s): a simulator sums its steps in floating point and
# stamps in whole nanoseconds, SITL's grid is origin + k / frame rate. Their roundings differ
# by far less (a 1 kHz simulator's summed clock drifts by 1e-13 s a step at worst); a sample
# this close before an instant is at it, or a frame on a simulator step waits for the next
# step (lock-step through ROS: a step nobody asks for until SITL resends, 1.1 s later).
SAME_INSTANT = 1e-6
FIX = ('stamp both with the physics time: start every node with use_sim_time:=true, and have '
       'the simulator stamp its messages with its own clock')


def clock_name(stamp: float, wall_now: float) -> str:
    """'wall-clock time' for a stamp within CLOCK_MISMATCH of wall_now, else 'simulated time'."""
    return 'wall-clock time' if abs(stamp - wall_now) < CLOCK_MISMATCH else 'simulated time'


def clocks_differ(stamp: float, reference_stamp: float, wall_now: float,
                  tolerance: float) -> bool:
    """
    Tell whether two inputs' newest stamps cannot come from one clock.

    They differ by more than tolerance (no input lags another that long), or one is near the
    wall clock and the other is not.
    """
    return (abs(stamp - reference_stamp) > tolerance
            or clock_name(stamp, wall_now) != clock_name(reference_stamp, wall_now))


def clocks_apart(name: str, stamp: float, reference: str, reference_stamp: float,
                 wall_now: float) -> str:
    """One line naming both clocks, their stamps, the offset and the fix."""
    offset = stamp - reference_stamp
    side = 'ahead of' if offset > 0.0 else 'behind'
    return (f"{name} stamps are {abs(offset):.3f} s {side} the {reference}'s, another clock "
            f'({name} {stamp:.3f} s: {clock_name(stamp, wall_now)}; {reference} '
            f'{reference_stamp:.3f} s: {clock_name(reference_stamp, wall_now)}); {FIX}')
