"""Lock-step through ROS without ROS: the step plan, and a link stepping a paused simulator."""

import math
import threading
from types import SimpleNamespace

import pytest

from ardupilot_json_bridge.core.samples import ImuSample, OdometrySample
from ardupilot_json_bridge.core.settings import GRID, StateSettings
from ardupilot_json_bridge.core.step_plan import StepPlan
from ardupilot_json_bridge.messages.inputs import stamp_seconds, time_parts

LEVEL = (1.0, 0.0, 0.0, 0.0)


def test_steps_reach_the_first_step_at_or_after_the_instant():
    plan = StepPlan(start=2.0, step=0.001)
    # By hand: 2.0 + 1 / 1200 = 2.000833...: the first step past it is 2.001, one step.
    assert plan.steps_to(2.0 + 1 / 1200) == 1
    plan.stepped(1)
    assert plan.reached == pytest.approx(2.001)
    # 2 / 1200 = 1.667 ms: at 2.002, one more; 2.001 itself is reached already.
    assert plan.steps_to(2.0 + 2 / 1200) == 1
    assert plan.steps_to(2.001) == 0
    assert plan.steps_to(1.5) == 0
    # 2.0105 needs 2.011: ten more steps.
    assert plan.steps_to(2.0105) == 10


def test_an_instant_on_a_step_computed_another_way_needs_no_extra_step():
    plan = StepPlan(start=0.0, step=0.001)
    plan.stepped(3)
    # 0.1 + 0.2 - 0.297 is 0.003 give or take an ulp: on the step reached, no step more.
    assert plan.steps_to(0.1 + 0.2 - 0.297) == 0
    assert plan.steps_to(0.003 + 1e-6) == 1


def test_before_any_sample_one_step_and_then_none():
    plan = StepPlan(start=0.0, step=0.004)
    assert plan.steps_to(None) == 1
    plan.stepped(1)
    assert plan.steps_to(None) == 0


@pytest.mark.parametrize('start, step', [(0.0, 0.0), (0.0, -0.001), (math.nan, 0.001),
                                         (0.0, math.inf)])
def test_a_step_size_that_cannot_be_is_one_clear_error(start, step):
    with pytest.raises(ValueError, match='finite start and a step above 0'):
        StepPlan(start, step)


def test_an_instant_that_is_no_number_steps_nothing():
    assert StepPlan(0.0, 0.001).steps_to(math.nan) == 0


def test_a_restart_counts_from_the_new_clock():
    plan = StepPlan(5.0, 0.001)
    plan.stepped(100)
    plan.restart_at(0.0)
    assert plan.reached == 0.0 and plan.steps_to(0.0025) == 3


class PausedWorld:
    """
    A paused simulator at 1 kHz that moves only when stepped: the body flies x = 2 t metres.

    Each step publishes IMU; every fourth, odometry (250 Hz, as mujoco_sim and Gazebo do).
    With ros_clock, its clock is a floating-point sum of its steps from start and its stamps
    are whole nanoseconds (mujoco_sim's, through builtin_interfaces/Time), and the plan starts
    from two of them as the bridge measures it; else stamps are exact multiples of 1 ms.
    """

    def __init__(self, link, start: float = 0.0, ros_clock: bool = False) -> None:
        self.link = link
        self.ros_clock = ros_clock
        self.time = 0.0
        self.steps_taken = 0
        while self.time < start - 1e-9:
            self.time += 0.001
            self.steps_taken += 1
        self.asked = []
        self.lock = threading.Lock()
        self._publish(self.steps_taken)
        before = self.stamp()
        self._take_step()
        self.plan = StepPlan(self.stamp(), self.stamp() - before)

    def stamp(self) -> float:
        if not self.ros_clock:
            return self.steps_taken * 0.001
        sec, nanosec = time_parts(self.time)
        return stamp_seconds(SimpleNamespace(stamp=SimpleNamespace(sec=sec, nanosec=nanosec)))

    def _take_step(self) -> None:
        self.time += 0.001
        self.steps_taken += 1
        self._publish(self.steps_taken)

    def _publish(self, step: int) -> None:
        stamp = self.stamp()
        state = self.link.state
        if step % 4 == 0:
            state.push_odometry(OdometrySample(stamp, (2.0 * stamp, 0.0, 0.0), (2.0, 0.0, 0.0),
                                               LEVEL, (0.0, 0.0, 0.0)))
        state.push_imu(ImuSample(stamp, (0.0, 0.0, 0.0), (0.0, 0.0, -9.80665)))

    def on_wait(self, instant) -> None:
        with self.lock:
            self.asked.append(instant)
            steps = self.plan.steps_to(instant)
            for _ in range(steps):
                self._take_step()
            self.plan.stepped(steps)


def test_a_link_stepping_a_paused_world_answers_every_frame_exactly_on_sitls_grid(
        make_link, make_peer):
    from ardupilot_json_bridge.link.sitl_link import SitlLink
    link = make_link(StateSettings(pacing=GRID), fresh_timeout=0.5)
    assert isinstance(link, SitlLink)
    world = PausedWorld(link)
    link.on_wait = world.on_wait
    peer = make_peer(link.address[1])
    replies = [peer.step() for _ in range(240)]
    # SITL at 1200 Hz (the peer's frame rate): reply k is at k / 1200 s, and the body, at
    # x = 2 t, is at 2 k / 1200 m: interpolated between the 1 ms steps, exactly. The grid
    # starts at the step the plan starts from (1 ms).
    for k, reply in enumerate(replies):
        assert reply['timestamp'] == pytest.approx(k / 1200, abs=1e-9)
        assert reply['position'][0] == pytest.approx(2 * (0.001 + k / 1200), abs=1e-9)
    # The world never ran ahead of the frame asked for by a step or more: 240 frames of
    # 1 / 1200 s are 0.19917 s, the first step at or after it is the 200th after the first.
    assert world.steps_taken == 1 + 200
    assert link.stats.unanswered == 0


def test_frames_on_a_step_of_a_summed_nanosecond_clock_are_answered_without_a_resend(
        make_link, make_peer):
    # mujoco_sim's clock sums its 1 ms steps in floating point and its stamps are whole
    # nanoseconds; SITL's grid is origin + k / 1200. Every sixth frame falls on a step, and
    # there the two roundings may differ, the more often the longer it runs (every other time
    # after eight seconds): the plan counted the step as reaching the frame's instant, the
    # state found the sample short of it by 1e-16 s and waited for a step nobody asked for,
    # until SITL resent the frame 1.1 s later (real ArduCopter crawled at 20 frames a wall
    # second and never armed). Before the fix this peer, which does not resend, got no reply
    # to frame 4830.
    link = make_link(StateSettings(pacing=GRID), fresh_timeout=0.5)
    world = PausedWorld(link, ros_clock=True)
    link.on_wait = world.on_wait
    peer = make_peer(link.address[1])
    frames = 10 * 1200
    for k in range(frames):
        reply = peer.step(timeout=1.0)
        assert reply['timestamp'] == pytest.approx(k / 1200, abs=1e-9)
        assert reply['position'][0] == pytest.approx(2 * (0.001 + k / 1200), abs=1e-6)
    # (frames - 1) / 1200 s on: the first 1 ms step at or after it, from the plan's start.
    assert world.steps_taken == 1 + math.ceil((frames - 1) / 1.2 - 1e-6)
    assert link.stats.unanswered == 0
