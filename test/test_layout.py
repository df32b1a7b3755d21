"""
The layout check against flights an independent generator mixed (test/mixed_flight.py).

An X airframe mixed as a PLUS is named with the fix, a reversed aileron and a reversed
steering channel too; clean draws of each vehicle give no wrong verdict, and `check` and the
live judge read the PWM from a recording and from the MuJoCo lock-step.
"""

from functools import lru_cache
import logging
import math
import subprocess
import sys
from typing import List, Optional
import warnings

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from ardupilot_json_bridge.checks.conventions import ConventionChecker
from ardupilot_json_bridge.checks.layout import NAME, plant_fit, quad_verdict
from ardupilot_json_bridge.checks.live import LiveConventions
from ardupilot_json_bridge.checks.verdicts import Check, format_table, OK, UNDECIDED, WRONG
from ardupilot_json_bridge.sources.bagfile import write_bag
import mixed_flight
import ros_messages

SEEDS = [1, 2, 3]
# Each flight is flown once per session: several tests judge the same one.
fly_quad = lru_cache(maxsize=None)(mixed_flight.fly_quad)
fly_plane = lru_cache(maxsize=None)(mixed_flight.fly_plane)
drive_rover = lru_cache(maxsize=None)(mixed_flight.drive_rover)


def filled(checker: ConventionChecker, record: mixed_flight.Record) -> ConventionChecker:
    for sample in record.imu:
        checker.add_imu(*sample)
    for sample in record.odometry:
        checker.add_odometry(*sample)
    for sample in record.pwm:
        checker.add_pwm(*sample)
    return checker


def judged(record: mixed_flight.Record, vehicle: Optional[str] = None) -> List[Check]:
    return filled(ConventionChecker(window=30.0, vehicle=vehicle), record).checks()


def layout(checks: List[Check]) -> Check:
    (check,) = [c for c in checks if c.name == NAME]
    return check


@pytest.mark.parametrize('seed', SEEDS)
def test_an_x_airframe_mixed_as_a_plus_is_named_with_the_frame_type(seed):
    checks = judged(fly_quad(mixed_flight.Flight(frame='X', mixer='PLUS', seed=seed)))
    check = layout(checks)
    print(f'\nX mixed as PLUS, seed {seed}:\n{format_table(checks)}')
    assert check.verdict == WRONG, format_table(checks)
    assert 'SITL mixes for QUAD/PLUS, the vehicle responds as QUAD/X' in check.measured
    assert 'FRAME_CLASS 1 and FRAME_TYPE 1' in check.fix
    assert [c.name for c in checks if c.verdict == WRONG] == [NAME], format_table(checks)


@pytest.mark.parametrize('seed', SEEDS)
@pytest.mark.parametrize('frame', ['X', 'PLUS'])
def test_a_quad_mixed_for_its_own_layout_is_ok_and_nothing_is_wrong(frame, seed):
    checks = judged(fly_quad(mixed_flight.Flight(frame=frame, mixer=frame, seed=seed)))
    assert layout(checks).verdict == OK, format_table(checks)
    assert f'QUAD/{frame}, the vehicle responds as QUAD/{frame}' in layout(checks).measured
    assert not [c for c in checks if c.verdict == WRONG], format_table(checks)


@pytest.mark.parametrize('frame, mixer', [('PLUS', 'X'), ('X', 'H')])
def test_other_mixes_are_never_called_ok_nor_named_wrongly(frame, mixer):
    check = layout(judged(fly_quad(mixed_flight.Flight(frame=frame, mixer=mixer))))
    assert check.verdict != OK, check
    if check.verdict == WRONG:
        assert f'SITL mixes for QUAD/{mixer}, the vehicle responds as QUAD/{frame}' in \
            check.measured, check


def test_motors_at_idle_leave_the_layout_undecided():
    flown = fly_quad(mixed_flight.Flight(seconds=4.0))
    record = mixed_flight.Record(flown.imu, flown.odometry,
                                 [(t, (1000,) * 4 + (0,) * 12) for t, _ in flown.pwm])
    check = layout(judged(record))
    assert check.verdict == UNDECIDED and 'fly for 3 s or more' in check.measured, check


@pytest.mark.parametrize('seed', SEEDS)
def test_a_reversed_aileron_is_named_and_a_right_one_is_ok(seed):
    reversed_checks = judged(fly_plane(reversed_aileron=True, seed=seed), 'plane')
    assert layout(reversed_checks).verdict == WRONG, format_table(reversed_checks)
    assert 'SERVO1_REVERSED' in layout(reversed_checks).fix
    checks = judged(fly_plane(seed=seed), 'plane')
    assert layout(checks).verdict == OK, format_table(checks)
    assert not [c for c in checks if c.verdict == WRONG], format_table(checks)


@pytest.mark.parametrize('seed', SEEDS)
def test_a_reversed_steering_channel_is_named_and_a_right_one_is_ok(seed):
    reversed_checks = judged(drive_rover(reversed_steering=True, seed=seed),
                             'rover')
    assert layout(reversed_checks).verdict == WRONG, format_table(reversed_checks)
    assert 'steering' in layout(reversed_checks).fix
    checks = judged(drive_rover(seed=seed), 'rover')
    assert layout(checks).verdict == OK, format_table(checks)
    assert not [c for c in checks if c.verdict == WRONG], format_table(checks)


@pytest.mark.parametrize('frame', ['child', 'world'])
def test_a_rover_heading_west_with_its_twist_in_either_frame_steers_right(frame):
    # The same right-wired drive turned to head west, its twist published in the child frame
    # or (odom_twist_frame: world) in the ENU world: the world twist read as the body's once
    # called the steering reversed.
    drive = mixed_flight.drive_rover(seed=1)
    west = Rotation.from_euler('z', math.pi)
    checker = ConventionChecker(window=30.0, vehicle='rover', odom_twist_frame=frame)
    for sample in drive.imu:
        checker.add_imu(*sample)
    for stamp, position, orientation, twist in drive.odometry:
        attitude = west * Rotation.from_quat(orientation)
        published = attitude.apply(twist) if frame == 'world' else twist
        checker.add_odometry(stamp, tuple(west.apply(position)), tuple(attitude.as_quat()),
                             tuple(published))
    for sample in drive.pwm:
        checker.add_pwm(*sample)
    checks = checker.checks()
    assert layout(checks).verdict == OK, format_table(checks)
    assert not [c for c in checks if c.verdict == WRONG], format_table(checks)


@pytest.mark.parametrize('record', ['plane', 'rover'])
def test_a_plane_or_rover_judged_as_a_copter_is_undecided_not_wrong(record):
    flown = (fly_plane(reversed_aileron=True) if record == 'plane'
             else drive_rover(reversed_steering=True))
    check = layout(judged(flown))
    assert check.verdict == UNDECIDED and 'name the vehicle' in check.measured, check


def sensor_messages(store, record: mixed_flight.Record) -> list:
    """Return a record's /clock, imu and odom as (topic, type, log time, message)."""
    messages = [('/imu', 'sensor_msgs/msg/Imu', round(t * 1e9),
                 ros_messages.imu(store, t, gyro, accel)) for t, gyro, accel in record.imu]
    messages += [('/clock', 'rosgraph_msgs/msg/Clock', round(t * 1e9) - 1,
                  ros_messages.clock(store, t)) for t, _, _ in record.imu]
    return messages + [('/odom', 'nav_msgs/msg/Odometry', round(t * 1e9),
                        ros_messages.odometry(store, t, position, q, linear))
                       for t, position, q, linear in record.odometry]


def write_flight_bag(path, record: mixed_flight.Record) -> None:
    """Write a record as the flight recorder once did: servo_pwm as UInt16MultiArray."""
    store = ros_messages.STORES['jazzy']
    pwm_type = store.types['std_msgs/msg/UInt16MultiArray']
    layout_type = store.types['std_msgs/msg/MultiArrayLayout']
    messages = sensor_messages(store, record)
    messages += [('/servo_pwm', 'std_msgs/msg/UInt16MultiArray', round(t * 1e9),
                  pwm_type(layout=layout_type(dim=[], data_offset=0),
                           data=np.array(pwm, dtype=np.uint16)))
                 for t, pwm in record.pwm]
    write_bag(str(path), sorted(messages, key=lambda m: m[2]), store)


def write_node_recording(path, record: mixed_flight.Record, batch: float = 0.05) -> None:
    """
    Write a record as `ros2 bag record` logs the node.

    servo_pwm is stamped with each frame's physics time but logged as the node publishes it,
    in batches up to 50 ms late.
    """
    store = ros_messages.STORES['jazzy']
    joint_state = store.types['sensor_msgs/msg/JointState']
    messages = sensor_messages(store, record)
    messages += [('/servo_pwm', 'sensor_msgs/msg/JointState',
                  round((math.floor(t / batch) + 1) * batch * 1e9),
                  joint_state(header=ros_messages.header(store, t),
                              name=[f'servo{n + 1}' for n in range(len(pwm))],
                              position=np.array(pwm, dtype=np.float64),
                              velocity=np.array([], dtype=np.float64),
                              effort=np.array([], dtype=np.float64)))
                 for t, pwm in record.pwm]
    write_bag(str(path), sorted(messages, key=lambda m: m[2]), store)


def test_check_places_a_recordings_pwm_at_its_frames_physics_time(tmp_path, monkeypatch,
                                                                  capsys):
    from ardupilot_json_bridge import cli
    flown = fly_quad(mixed_flight.Flight(mixer='PLUS'))
    bag = tmp_path / 'node_recording'
    write_node_recording(bag, flown)
    placed = []
    add_pwm = ConventionChecker.add_pwm

    def keep(checker, stamp, pwm):
        placed.append((stamp, tuple(pwm)))
        add_pwm(checker, stamp, pwm)
    monkeypatch.setattr(ConventionChecker, 'add_pwm', keep)
    assert cli.main(['check', str(bag)]) == 1
    # At the stamps the generator flew them, against the IMU's; not at the batches' log times.
    assert [t for t, _ in placed] == pytest.approx([t for t, _ in flown.pwm], abs=1e-9)
    assert [p for _, p in placed] == [tuple(p) for _, p in flown.pwm]
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(NAME)]
    assert rows and 'SITL mixes for QUAD/PLUS' in rows[0], rows


def check_command(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'ardupilot_json_bridge.cli', 'check',
                           *arguments], capture_output=True, text=True, timeout=300)


def test_check_command_names_a_plus_mixed_x_from_a_recording(tmp_path):
    bag = tmp_path / 'plus_mixed'
    write_flight_bag(bag, fly_quad(mixed_flight.Flight(mixer='PLUS')))
    result = check_command(str(bag))
    assert result.returncode == 1, result.stdout + result.stderr[-2000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith(NAME)]
    assert rows and 'SITL mixes for QUAD/PLUS' in rows[0] and 'FRAME_TYPE 1' in rows[0], \
        result.stdout


def test_check_command_names_a_reversed_aileron_with_vehicle_plane(tmp_path):
    bag = tmp_path / 'reversed_aileron'
    write_flight_bag(bag, fly_plane(reversed_aileron=True))
    result = check_command(str(bag), '--vehicle', 'plane')
    assert result.returncode == 1, result.stdout + result.stderr[-2000:]
    assert 'SERVO1_REVERSED' in result.stdout


def test_live_judge_warns_once_of_the_layout(caplog):
    checker = ConventionChecker(window=30.0)
    live = LiveConventions(checker, logging.getLogger('test.layout'))
    filled(checker, fly_quad(mixed_flight.Flight(mixer='PLUS')))
    with caplog.at_level(logging.WARNING, logger='test.layout'):
        live.judge()
        live.judge()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and 'QUAD/PLUS' in lines[0] and 'FRAME_TYPE 1' in lines[0], lines


def test_the_mujoco_lock_step_feeds_its_pwm_to_the_checks():
    from ardupilot_json_bridge.cli import default_preset, load_config
    from ardupilot_json_bridge.core.protocol import ServoPacket
    from ardupilot_json_bridge.core.settings import SAMPLES, StateSettings
    from ardupilot_json_bridge.core.state import SensorState
    from ardupilot_json_bridge.sources.mujoco_source import MujocoLockStep
    from ardupilot_json_bridge.sources.mujoco_vehicle import MujocoVehicle
    config = load_config(default_preset(), '', {})
    checker = ConventionChecker(window=10.0)
    source = MujocoLockStep(MujocoVehicle(), SensorState(StateSettings(pacing=SAMPLES)),
                            config.outputs[0], checker=checker)
    for frame in range(60):
        source.on_frame(ServoPacket(1200, frame, (1600,) * 4 + (0,) * 12))
    check = layout(checker.checks())
    assert check.verdict == UNDECIDED and '0.0 s with the motors above' in check.measured, check


def test_a_quad_spinning_up_in_yaw_is_no_timing_fault():
    # Mixed as an H, an X's yaw runs away: turns of more than half a revolution between the
    # offset check's interval ends once read as an 89 ms offset.
    checks = judged(fly_quad(mixed_flight.Flight(frame='X', mixer='H', seed=5)))
    assert not [c for c in checks if c.verdict == WRONG], format_table(checks)


@pytest.mark.parametrize('vehicle, sitl, verdict', [
    ('X', 'X', OK), ('PLUS', 'PLUS', OK), ('X', 'PLUS', WRONG), ('PLUS', 'X', WRONG),
    ('H', 'PLUS', WRONG),
    # A real QUAD/X flight through the node once fitted the body as QUAD/H in closed loop and
    # was called wrong: a yaw sign alone is never a fault.
    ('H', 'X', UNDECIDED), ('X', None, UNDECIDED), (None, 'X', UNDECIDED)])
def test_only_roll_and_pitch_decide_a_quad_layout(vehicle, sitl, verdict):
    check = quad_verdict(vehicle, sitl, 'figures')
    assert check.verdict == verdict
    if verdict == WRONG:
        # FRAME_TYPE from AP_Motors_Class.h: 0 PLUS, 1 X (never 3, H, from a yaw fit).
        expected = {'X': 1, 'H': 1, 'PLUS': 0}[vehicle]
        assert f'FRAME_CLASS 1 and FRAME_TYPE {expected} ' in check.fix, check.fix


def test_a_body_that_never_accelerates_fits_no_plant_and_warns_nothing():
    demands = np.random.default_rng(3).uniform(-100.0, 100.0, (400, 4))
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # numpy's 0 / 0 would be a RuntimeWarning
        assert plant_fit(demands, np.zeros((400, 3))) is None
