"""The MuJoCo rovers: steering, throttle and skid-steer signs, and real ArduRover's mission."""

from contextlib import contextmanager
import math
import signal
import subprocess
import sys
from typing import Iterator

import numpy as np
import pytest

pytest.importorskip('mujoco', reason='needs the mujoco package (pip install mujoco)')

from ardupilot_json_bridge.cli import default_preset, load_config, main  # noqa: E402
from ardupilot_json_bridge.core.settings import SAMPLES, StateSettings  # noqa: E402
from ardupilot_json_bridge.core.state import SensorState  # noqa: E402
from ardupilot_json_bridge.link.sitl_link import SitlLink  # noqa: E402
from ardupilot_json_bridge.sources.flight_recorder import FlightRecorder  # noqa: E402
from ardupilot_json_bridge.sources.mujoco_source import MujocoLockStep  # noqa: E402
from ardupilot_json_bridge.sources.mujoco_vehicle import (  # noqa: E402
    MujocoVehicle, shipped_model, VehicleError)
from conftest import free_udp_port, reaped  # noqa: E402
from recorded import assert_layout_named, check_recording, wrong_rows  # noqa: E402
import sitl_flight  # noqa: E402
from sitl_peer import SitlPeer  # noqa: E402
import sitl_rover  # noqa: E402

FRAME = 1 / 1200
WHEEL_RADIUS, WHEELBASE = 0.1, 0.34     # rover.xml's geometry, read off the file by hand


def serve(make_link, make_peer, vehicle: str, pwm: dict, seconds: float, prepare=None):
    """
    Serve a shipped vehicle to a SITL peer holding the given SERVO channels; return replies.

    pwm maps SERVO channels to microseconds (the rest stay at 1500); prepare, if given, sets
    the vehicle up before the first frame.
    """
    path, shipped = shipped_model(vehicle)
    config = load_config(default_preset(shipped.preset), '', {})
    model = MujocoVehicle(path)
    if prepare is not None:
        prepare(model)
    source = MujocoLockStep(model, SensorState(StateSettings()), config.outputs)
    link = make_link(StateSettings(pacing=SAMPLES), on_frame=lambda p: source.on_frame(p),
                     fresh_timeout=1.0)
    source.state = link.state
    peer = make_peer(link.address[1])
    values = [pwm.get(channel, 1500) for channel in range(1, 17)]
    return [peer.step(pwm=values) for _ in range(round(seconds / FRAME))]


def drive(make_link, make_peer, vehicle: str, pwm1: int, pwm3: int, seconds: float):
    """Serve a rover to a SITL peer sending SERVO1 and SERVO3; return the replies."""
    return serve(make_link, make_peer, vehicle, {1: pwm1, 3: pwm3}, seconds)


def heading(reply) -> float:
    """Yaw (NED, radians clockwise from north) of a reply's w-first quaternion."""
    w, x, y, z = reply['quaternion']
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def test_throttle_forward_drives_forward_and_back_drives_back(make_link, make_peer):
    # The rover starts facing ENU x (east): NED yaw 90 degrees, forward is NED +y.
    forward = drive(make_link, make_peer, 'rover', 1500, 1600, 2.0)
    assert heading(forward[0]) == pytest.approx(math.pi / 2, abs=0.01)
    north, east, _ = forward[-1]['position']
    # SERVO3 1600 us: (0.6 - 0.5) x 320 = 32 rad/s, 3.2 m/s on 0.1 m wheels, once up to speed.
    assert forward[-1]['velocity'][1] == pytest.approx(32 * WHEEL_RADIUS, rel=0.1)
    assert east > 3.0 and abs(north) < 0.1
    backward = drive(make_link, make_peer, 'rover', 1500, 1400, 2.0)
    assert backward[-1]['velocity'][1] == pytest.approx(-32 * WHEEL_RADIUS, rel=0.1)


def test_right_steering_turns_right_at_the_ackermann_rate(make_link, make_peer):
    replies = drive(make_link, make_peer, 'rover', 1600, 1550, 3.0)
    # SERVO1 1600 us steers -(0.6 - 0.5) = 0.1 rad right; 1550 us drives 1.6 m/s. Without
    # slip a bicycle turns at v tan(delta) / L, clockwise from above: +z in FRD.
    expected = 16 * WHEEL_RADIUS * math.tan(0.1) / WHEELBASE
    rates = [reply['imu.gyro'][2] for reply in replies[-600:]]
    assert np.mean(rates) == pytest.approx(expected, rel=0.15)
    turned = heading(replies[-1]) - heading(replies[0])
    assert 0.5 < turned < math.pi


def test_skid_steer_left_faster_turns_right_and_equal_drives_straight(make_link, make_peer):
    # rover-skid.parm: SERVO1 throttle left, SERVO3 throttle right.
    spin = drive(make_link, make_peer, 'rover_skid', 1700, 1300, 2.0)
    rates = [reply['imu.gyro'][2] for reply in spin[-600:]]
    assert np.mean(rates) > 0.5                 # clockwise from above: a right turn
    assert math.hypot(*spin[-1]['position'][:2]) < 0.3   # on the spot
    straight = drive(make_link, make_peer, 'rover_skid', 1700, 1700, 2.0)
    assert abs(heading(straight[-1]) - math.pi / 2) < 0.02
    # (0.7 - 0.5) x 80 = 16 rad/s on every wheel: 1.6 m/s forward, east.
    assert straight[-1]['velocity'][1] == pytest.approx(16 * WHEEL_RADIUS, rel=0.1)
    left = drive(make_link, make_peer, 'rover_skid', 1600, 1800, 2.0)
    assert np.mean([reply['imu.gyro'][2] for reply in left[-600:]]) < -0.2


@pytest.mark.parametrize('stray, expected', [(0.0, 0.0), (0.6, 0.6), (8.0, 8.0)])
def test_the_cross_track_error_counts_a_stray_mid_leg_however_far(stray, expected):
    # A 20 m square, the track on its first leg but `stray` m off for its middle 2 m: the
    # error is the stray, by hand (a filter on the distance across once hid an 8 m one).
    corners = [(0.0, 0.0), (20.0, 0.0), (20.0, 20.0), (0.0, 20.0), (0.0, 0.0)]
    track = [(x / 2, stray if 9.0 <= x / 2 <= 11.0 else 0.0) for x in range(41)]
    errors = sitl_rover.cross_track_errors(track, corners, sitl_rover.turn_margin(3.0, 5.0))
    assert max(errors) == pytest.approx(expected)


def test_a_preset_that_does_not_fit_the_model_is_refused_with_the_actuators_named():
    config = load_config(default_preset('mujoco_rover_skid.yaml'), '', {})
    vehicle = MujocoVehicle(shipped_model('rover')[0])
    with pytest.raises(VehicleError, match=r'wheels drive 4 outputs but .*rover.xml has 6 '
                                           r'actuators \(steer_left, steer_right, '):
        MujocoLockStep(vehicle, SensorState(StateSettings()), config.outputs)


def test_an_unknown_model_name_is_named_with_the_shipped_ones(caplog):
    assert main(['mujoco', '--model', 'boat']) == 2
    assert "--model: 'boat' is neither a shipped vehicle (quad_x, rover, rover_skid" in \
        caplog.text


def recorded_loop(make_link, make_peer, vehicle: str, overrides: dict, recording: str,
                  seconds: float, control, prepare=None) -> None:
    """
    Serve a shipped vehicle, its preset changed by overrides, to a SITL peer; record it.

    control(frame, reply) returns the next frame's 16 PWM values (the first frame gets
    control(0, None)); prepare, if given, sets the vehicle up before the first frame.
    """
    path, shipped = shipped_model(vehicle)
    config = load_config(default_preset(shipped.preset), '', overrides)
    model = MujocoVehicle(path)
    if prepare is not None:
        prepare(model)
    source = MujocoLockStep(model, SensorState(StateSettings()), config.outputs,
                            recorder=FlightRecorder(recording, '/commands'))
    link = make_link(StateSettings(pacing=SAMPLES), on_frame=lambda p: source.on_frame(p),
                     fresh_timeout=1.0)
    source.state = link.state
    peer = make_peer(link.address[1])
    try:
        pwm = control(0, None)
        for k in range(round(seconds / FRAME)):
            pwm = control(k + 1, peer.step(pwm=pwm))
    finally:
        source.close()


def steered_drive(make_link, make_peer, recording: str, multiplier: float) -> None:
    """
    Drive the rover after changing headings, as ArduRover would steer it; record the drive.

    A steering loop of this test's own, in ArduPilot's convention: more SERVO1 PWM turns
    right (NED heading rising). multiplier is the preset's steering multiplier: -1 as shipped,
    +1 a steering mapped the wrong way round.
    """
    targets = [math.pi / 2 + turn for turn in (0.0, 0.8, -0.4, 0.6, -0.8)]
    steering = [1500]

    def control(frame: int, reply) -> list:
        if reply is not None:
            target = targets[min(int(frame * FRAME / 1.6), len(targets) - 1)]
            error = math.remainder(target - heading(reply), 2 * math.pi)
            # Slewed at 1200 us/s, as a rate controller's output moves, not slammed.
            demand = 1500 + 200 * min(max(1.5 * error, -1.0), 1.0)
            steering[0] = int(round(steering[0] + min(max(demand - steering[0], -1.0), 1.0)))
        return [steering[0], 1500, 1550] + [1500] * 13

    recorded_loop(make_link, make_peer, 'rover', {'outputs.steering.multiplier': multiplier},
                  recording, 8.0, control)


def test_a_recorded_drive_with_the_steering_mapped_backwards_is_named_by_check(
        make_link, make_peer, tmp_path):
    pytest.importorskip('rosbags', reason='the drive is recorded and checked as a bag: needs '
                                          "rosbags (pip install '.[test]')")
    steered_drive(make_link, make_peer, str(tmp_path / 'right'), -1.0)
    steered_drive(make_link, make_peer, str(tmp_path / 'reversed'), 1.0)
    assert_layout_named(str(tmp_path / 'right'), str(tmp_path / 'reversed'), 'rover',
                        'SERVO1 (steering)', 'reverse the steering')


def test_a_recorded_skid_steer_drive_is_judged_on_its_left_side_apart_from_its_right(
        make_link, make_peer, tmp_path):
    pytest.importorskip('rosbags', reason='the drive is recorded and checked as a bag: needs '
                                          "rosbags (pip install '.[test]')")
    # rover-skid.parm: SERVO1 the left side, SERVO3 the right. Left turns only, as the square
    # mission's, and the speed loop pushing both sides up in each (and swaying of its own):
    # SERVO1 alone rises as the rover turns left, as ArduRover's did after its corners.
    targets = [math.pi / 2 + turn for turn in (0.0, -0.6, -1.2, -1.8, -2.4)]

    def control(frame: int, reply) -> list:
        turn = 0.0
        if reply is not None:
            target = targets[min(int(frame * FRAME / 1.6), len(targets) - 1)]
            turn = min(max(1.5 * math.remainder(target - heading(reply), 2 * math.pi), -1.0),
                       1.0)
        throttle = 1620 + 250 * abs(turn) + 60 * math.sin(2 * math.pi * 0.7 * frame * FRAME)
        return [round(throttle + 150 * turn), 1500, round(throttle - 150 * turn)] + [1500] * 13

    bag = str(tmp_path / 'skid')
    recorded_loop(make_link, make_peer, 'rover_skid', {}, bag, 8.0, control)
    code, table, rows = check_recording(bag, 'rover')
    print(f'\n{table}')
    layout = rows['layout: what SITL mixes for']
    assert layout[0] == 'ok' and 'SERVO1 (steering)' in layout[1], table


@contextmanager
def lock_step_shipped(vehicle: str, instance: int, recording: str) -> Iterator[MujocoVehicle]:
    """Serve SITL instance from a shipped vehicle in lock-step, recording; yield the model."""
    path, shipped = shipped_model(vehicle)
    config = load_config(default_preset(shipped.preset), '', {'port': 0, 'instance': instance})
    model = MujocoVehicle(path)
    state = SensorState(StateSettings(pacing=SAMPLES))
    source = MujocoLockStep(model, state, config.outputs,
                            recorder=FlightRecorder(recording, '/commands'))
    link = SitlLink(config.link, state, on_frame=source.on_frame, on_restart=source.on_restart)
    link.start()
    try:
        yield model
    finally:
        link.stop()
        source.close()


def mission_figures(record, corners, wp_speed: float, wp_radius: float = 3.0):
    """Return the worst waypoint miss, cross-track error and the home error, in metres."""
    misses = [sitl_rover.nearest(record.track, corner) for corner in corners[1:]]
    margin = sitl_rover.turn_margin(wp_radius, wp_speed)
    errors = sitl_rover.cross_track_errors(record.track, corners, margin)
    home = math.hypot(*record.track[-1])
    return max(misses), max(errors) if errors else math.inf, home


@pytest.mark.skipif(sitl_rover.rover_binary() is None,
                    reason='real ArduRover: set ARDUPILOT_SITL_DIR to a folder with ardurover '
                           'and rover.parm')
@pytest.mark.parametrize('vehicle, wp_speed', [('rover', 5.0), ('rover_skid', 3.0)])
def test_real_ardurover_drives_a_20_m_square_in_auto_in_lock_step(vehicle, wp_speed, tmp_path):
    pytest.importorskip('rosbags', reason='the drive is recorded and checked as a bag: needs '
                                          "rosbags (pip install '.[test]')")
    # WP_SPEED and WP_RADIUS (3 m) as rover.parm and rover-skid.parm set them.
    instance = sitl_flight.instance(4)
    recording = str(tmp_path / 'drive')
    with lock_step_shipped(vehicle, instance, recording) as model, \
            sitl_rover.rover_sitl(instance=instance, speedup=3,
                                  skid=vehicle == 'rover_skid') as sitl:
        record, corners = sitl_rover.drive_square(
            sitl, 20.0, lambda: tuple(model.state().position[:2]))
        log = sitl.log()
    assert record.armed and record.finished, (record.reached, record.texts[-8:], log[-1500:])
    miss, cross_track, home = mission_figures(record, corners, wp_speed)
    corner = sitl_rover.worst_path_distance(record.track, corners)
    print(f'\n{vehicle}: square of 20 m in AUTO, {model.time:.0f} s of physics in '
          f'{record.wall_seconds:.0f} s: worst waypoint miss {miss:.2f} m, cross-track error '
          f'{cross_track:.2f} m along the legs, {corner:.2f} m at worst (corners), home '
          f'error {home:.2f} m')
    # ArduRover itself said it reached each waypoint (within WP_RADIUS 3 m by its estimate);
    # the truth's closest approach, sampled with SITL's messages, may lie a little further.
    assert record.reached == [1, 2, 3, 4], record.reached
    assert miss < 3.5 and cross_track < 1.0 and home < 2.0, (miss, cross_track, home)
    # The recording of the whole drive, judged as a rover: nothing wrong.
    code, table, rows = check_recording(recording, 'rover')
    print(f'the recorded drive, checked:\n{table}')
    assert code == 0 and not wrong_rows(rows), table


def test_the_mujoco_command_drives_the_shipped_rover_by_name():
    port = free_udp_port()
    command = [sys.executable, '-m', 'ardupilot_json_bridge.cli', 'mujoco', '--model', 'rover',
               '--port', str(port)]
    with reaped(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)) as process:
        peer = SitlPeer(port)
        try:
            replies = peer.lock_step(1200, [1500, 1500, 1600] + [1500] * 13, timeout=30.0)
        finally:
            peer.close()
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    assert len(replies) == 1200 and process.returncode == 0, output
    assert ('6 actuators (steer_left SERVO1, steer_right SERVO1, wheel_front_left SERVO3, '
            'wheel_front_right SERVO3, wheel_rear_left SERVO3, wheel_rear_right SERVO3)'
            in output), output
    # A second at 3.2 m/s after the spin-up: more than two metres east, none north.
    north, east, _ = replies[-1]['position']
    assert east > 2.0 and abs(north) < 0.1, replies[-1]
