"""The MuJoCo plane: SIM_Plane's aerodynamics by hand, surface signs, wind and airspeed."""

import math

import numpy as np
import pytest

pytest.importorskip('mujoco', reason='needs the mujoco package (pip install mujoco)')

from ardupilot_json_bridge.cli import main  # noqa: E402
from ardupilot_json_bridge.sources.fixed_wing import (  # noqa: E402
    Coefficients, drag_coefficient, lift_coefficient, wrench)
from ardupilot_json_bridge.sources.mujoco_vehicle import (  # noqa: E402
    MujocoVehicle, shipped_model)
from ardupilot_json_bridge.sources.wind import Wind  # noqa: E402
from conftest import free_udp_port  # noqa: E402
from recorded import assert_layout_named, check_recording, wrong_rows  # noqa: E402
import sitl_flight  # noqa: E402
import sitl_plane  # noqa: E402
from test_mujoco_rover import FRAME, lock_step_shipped, recorded_loop, serve  # noqa: E402

SPEED, ALTITUDE = 20.0, 100.0
# SIM_Plane.h's set, typed here from ArduPilot's source (not read from plane.xml).
SIM_PLANE = dict(
    s=0.45, b=1.88, c=0.24, c_lift_0=0.56, c_lift_deltae=0, c_lift_a=6.9, c_lift_q=0,
    mcoeff=50, oswald=0.9, alpha_stall=0.4712, c_drag_q=0, c_drag_deltae=0.0, c_drag_p=0.1,
    c_y_0=0, c_y_b=-0.98, c_y_p=0, c_y_r=0, c_y_deltaa=0, c_y_deltar=-0.2, c_l_0=0, c_l_p=-1.0,
    c_l_b=-0.12, c_l_r=0.14, c_l_deltaa=0.25, c_l_deltar=-0.037, c_m_0=0.045, c_m_a=-0.7,
    c_m_q=-20, c_m_deltae=1.0, c_n_0=0, c_n_b=0.25, c_n_p=0.022, c_n_r=-1, c_n_deltaa=0.00,
    c_n_deltar=0.1, deltaa_max=0.3491, deltae_max=0.3491, deltar_max=0.3491)


def in_flight(vehicle: MujocoVehicle) -> None:
    """Put the plane 100 m up, level, flying east at 20 m/s."""
    import mujoco
    vehicle.data.qpos[2] = ALTITUDE
    vehicle.data.qvel[0] = SPEED
    mujoco.mj_forward(vehicle.model, vehicle.data)


def test_the_model_carries_sim_planes_coefficients():
    vehicle = MujocoVehicle(shipped_model('plane')[0])
    assert vehicle.aero.k == Coefficients(**SIM_PLANE)
    assert vehicle.model.body_subtreemass[1] == pytest.approx(1.93)


def test_lift_is_linear_below_the_stall_and_falls_beyond_it():
    k = Coefficients(**SIM_PLANE)
    # Far below the stall the sigmoid is ~0: c_lift_0 + c_lift_a alpha, by hand.
    assert lift_coefficient(k, 0.1) == pytest.approx(0.56 + 0.69, rel=1e-4)
    # Well past it (0.7 rad) a flat plate: 2 sin^2 cos.
    assert lift_coefficient(k, 0.7) == pytest.approx(2 * math.sin(0.7) ** 2 * math.cos(0.7),
                                                     rel=1e-4)
    assert lift_coefficient(k, 0.55) < lift_coefficient(k, 0.4)
    # Drag: 0.1 + CL^2 / (pi 0.9 AR), AR = 1.88^2 / 0.45.
    assert drag_coefficient(k, 0.0) == pytest.approx(
        0.1 + 0.56 ** 2 / (math.pi * 0.9 * 1.88 ** 2 / 0.45))


def test_the_wrench_in_level_flight_by_hand():
    k = Coefficients(**SIM_PLANE)
    force, moment = wrench(k, np.array([20.0, 0, 0]), np.zeros(3), 0.5, 0.0, 0.0)
    qbar = 0.5 * 1.225 * 400 * 0.45
    assert force[2] == pytest.approx(-qbar * 0.56)             # lift up: FRD -z
    assert force[0] == pytest.approx(-qbar * drag_coefficient(k, 0.0))
    assert moment[0] == pytest.approx(qbar * 1.88 * 0.25 * 0.5)   # right roll
    assert moment[1] == pytest.approx(qbar * 0.24 * 0.045)


def rates(replies, axis: int, last: int = 240) -> float:
    return float(np.mean([reply['imu.gyro'][axis] for reply in replies[-last:]]))


def test_right_aileron_rolls_right_at_the_rate_damping_allows(make_link, make_peer):
    right = serve(make_link, make_peer, 'plane', {1: 1700}, 0.5, in_flight)
    left = serve(make_link, make_peer, 'plane', {1: 1300}, 0.5, in_flight)
    # Steady roll rate where aileron and roll damping balance (SIM_Plane's moment, by hand):
    # c_l_deltaa d = -c_l_p b p / (2 V), d = 0.4 of full deflection.
    steady = 0.25 * 0.4 * 2 * SPEED / (1.0 * 1.88)
    assert rates(right, 0) > 0.5 * steady and rates(left, 0) < -0.5 * steady
    assert rates(right, 0) - rates(left, 0) == pytest.approx(2 * steady, rel=0.3)


def test_up_elevator_pitches_up_and_right_rudder_yaws_right(make_link, make_peer):
    up = serve(make_link, make_peer, 'plane', {2: 1700}, 0.4, in_flight)
    down = serve(make_link, make_peer, 'plane', {2: 1300}, 0.4, in_flight)
    assert rates(up, 1) > rates(down, 1) + 0.3              # FRD y: nose up
    right = serve(make_link, make_peer, 'plane', {4: 1800}, 0.4, in_flight)
    left = serve(make_link, make_peer, 'plane', {4: 1200}, 0.4, in_flight)
    assert rates(right, 2) > 0.1 > -0.1 > rates(left, 2)    # FRD z: nose right


def test_throttle_accelerates_and_sitl_hears_the_airspeed(make_link, make_peer):
    idle = serve(make_link, make_peer, 'plane', {3: 1000}, 0.5, in_flight)
    full = serve(make_link, make_peer, 'plane', {3: 2000}, 0.5, in_flight)
    # Facing east: forward is NED +y.
    assert full[-1]['velocity'][1] > idle[-1]['velocity'][1] + 1.0
    assert full[-1]['airspeed'] == pytest.approx(math.hypot(*full[-1]['velocity']), rel=0.01)
    assert full[-1]['velocity_wind'] == (0.0, 0.0, 0.0)


def test_a_steady_wind_is_felt_and_told_to_sitl(make_link, make_peer):
    def windy(vehicle):
        in_flight(vehicle)
        vehicle.wind = Wind((0.0, 5.0, 0.0))    # from the south: blowing north, 5 m/s

    replies = serve(make_link, make_peer, 'plane', {}, 0.5, windy)
    assert replies[-1]['velocity_wind'] == pytest.approx((5.0, 0.0, 0.0))   # NED north
    # The wind pushes the plane north (and yaws it into the wind, nose left: FRD z < 0).
    assert replies[-1]['velocity'][0] > 0.5
    air = np.subtract(replies[-1]['velocity'], (5.0, 0.0, 0.0))
    assert replies[-1]['airspeed'] == pytest.approx(np.linalg.norm(air), rel=0.01)


def test_gusts_vary_about_the_steady_wind_with_the_spread_asked():
    wind = Wind((3.0, 0.0, 0.0), gust=1.5, time_constant=0.5, seed=1)
    samples = np.array([wind.step(0.01).copy() for _ in range(200000)])
    assert samples.mean(axis=0) == pytest.approx((3.0, 0.0, 0.0), abs=0.1)
    assert samples.std(axis=0) == pytest.approx((1.5, 1.5, 1.5), rel=0.1)


def rolled_flight(make_link, make_peer, recording: str, multipliers: list) -> None:
    """
    Fly the plane through bank steps, as ArduPlane's roll loop would; record the flight.

    A roll loop of this test's own, in ArduPilot's convention: more SERVO1 PWM rolls right.
    multipliers are the surfaces' (left and right aileron, elevator, rudder, nose wheel).
    """
    targets = [0.0, 0.4, -0.4, 0.3, -0.3, 0.4, -0.2]

    def control(frame: int, reply) -> list:
        aileron = 1500
        if reply is not None:
            w, x, y, z = reply['quaternion']
            roll = math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
            target = targets[min(int(frame * FRAME / 0.8), len(targets) - 1)]
            error = math.remainder(target - roll, 2 * math.pi)
            demand = 2.5 * error
            aileron = int(round(1500 + 400 * min(max(demand, -1.0), 1.0)))
        return [aileron, 1500, 1700, 1500] + [1500] * 12

    recorded_loop(make_link, make_peer, 'plane', {'outputs.surfaces.multiplier': multipliers},
                  recording, 6.0, control, in_flight)


def test_a_recorded_flight_with_the_aileron_mapped_backwards_is_named_by_check(
        make_link, make_peer, tmp_path):
    pytest.importorskip('rosbags', reason='the flight is recorded and checked as a bag: needs '
                                          "rosbags (pip install '.[test]')")
    shipped = [0.6982] * 5
    rolled_flight(make_link, make_peer, str(tmp_path / 'right'), shipped)
    rolled_flight(make_link, make_peer, str(tmp_path / 'reversed'),
                  [-0.6982, -0.6982] + shipped[2:])
    assert_layout_named(str(tmp_path / 'right'), str(tmp_path / 'reversed'), 'plane',
                        'SERVO1 (aileron)', 'reverse the aileron')


def wind_estimate_error(record, truth_enu) -> float:
    """Return how far ArduPlane's last WIND estimate is from the truth, m/s (horizontal)."""
    direction, speed, _ = record.wind[-1]
    # WIND.direction: degrees the wind comes from, clockwise from north.
    east = -speed * math.sin(math.radians(direction))
    north = -speed * math.cos(math.radians(direction))
    return math.hypot(east - truth_enu[0], north - truth_enu[1])


def judge_circuit(record, wind, how: str) -> None:
    """Print and check a circuit's figures: loiter radius and altitude, RTL, wind estimate."""
    # plane.parm: WP_LOITER_RAD 80 m; LOITER holds the altitude it starts at.
    # Judged once settled on the circle (its first third brings the take-off's level-off and
    # the turn onto the circle); the whole loiter's altitude error is printed too.
    held = record.loiter[0][2]
    settled = record.loiter[len(record.loiter) // 3:]
    _, _, radius, _ = sitl_plane.circle(settled)
    altitude_error = max(abs(point[2] - held) for point in settled)
    entry_error = max(abs(point[2] - held) for point in record.loiter)
    home = min(math.hypot(point[0], point[1]) for point in record.rtl)
    estimate_error = wind_estimate_error(record, wind)
    print(f'\nArduPlane {how} in {record.wall_seconds:.0f} s, wind {wind} m/s (ENU): took off '
          f'to {max(p[2] for p in record.takeoff):.1f} m (TKOFF_ALT 50), loiter radius '
          f'{radius:.1f} m (WP_LOITER_RAD 80), altitude within {altitude_error:.1f} m of '
          f'{held:.1f} m ({entry_error:.1f} m from entering the loiter), RTL passed '
          f'{home:.0f} m from home at up to {max(p[2] for p in record.rtl):.0f} m; wind '
          f'estimate off by {estimate_error:.2f} m/s')
    assert abs(radius - 80.0) < 0.3 * 80.0 and altitude_error < 5.0, (radius, altitude_error)
    assert home < 80.0 * 1.3
    assert estimate_error < 1.5, record.wind[-5:]


@pytest.mark.skipif(sitl_plane.plane_binary() is None,
                    reason='real ArduPlane: set ARDUPILOT_SITL_DIR to a folder with arduplane '
                           'and plane.parm')
def test_real_arduplane_takes_off_loiters_and_returns_in_lock_step_in_a_wind(tmp_path):
    pytest.importorskip('rosbags', reason='the flight is recorded and checked as a bag: needs '
                                          "rosbags (pip install '.[test]')")
    instance = sitl_flight.instance(6)
    wind = (-5.0, 0.0, 0.0)          # from the east, 5 m/s: a headwind for the take-off
    recording = str(tmp_path / 'flight')
    with lock_step_shipped('plane', instance, recording) as model:
        model.wind = Wind(wind)
        with sitl_plane.plane_sitl(instance=instance, speedup=3) as sitl:
            record = sitl_plane.fly_circuit(sitl, lambda: tuple(model.state().position))
            log = sitl.log()
    assert record.took_off, (record.texts[-8:], log[-1500:])
    judge_circuit(record, wind, f'in lock-step, {model.time:.0f} s of physics')
    # The recording of the whole flight, judged as a plane: nothing wrong.
    code, table, rows = check_recording(recording, 'plane')
    print(f'the recorded flight, checked:\n{table}')
    assert code == 0 and not wrong_rows(rows), table


@pytest.mark.parametrize('arguments, message', [
    (['--model', 'rover', '--wind', '3,0'], 'rover.xml has no aerodynamics to feel a wind'),
    (['--model', 'plane', '--wind', '3,east'], "expected EAST,NORTH[,UP] in m/s, got '3,east'"),
    (['--model', 'plane', '--gust', '-1'], '--gust: -1 is below the minimum 0'),
    (['--model', 'plane', '--wind', '3,nan'], '--wind[1]: expected a finite number, got nan'),
])
def test_a_wind_the_engine_cannot_blow_is_refused_before_anything_starts(
        arguments, message, caplog):
    assert main(['mujoco', *arguments, '--port', str(free_udp_port())]) == 2
    assert message in caplog.text
