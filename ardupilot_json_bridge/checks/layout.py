"""
The layout SITL mixes for, against the vehicle's: from the PWM it sends and what follows.

A copter: ArduCopter turns roll, pitch and yaw demands into motor outputs through its frame's
factors. Two fits over the flight name two layouts. The vehicle's is the one whose demands
the body answers axis by axis: read through its factors, the PWM's differences (throttle
taken out) drive the angular accelerations without crossing axes. SITL's is the one whose
demands behave as its rate controller: each axis pushes against its own rate, never the
other axes'. An X airframe mixed as a PLUS answers a roll demand about a diagonal: the two
layouts differ, and the fix is SITL's FRAME_CLASS and FRAME_TYPE.

A plane: the aileron channel's PWM away from its trim must roll the way ArduPlane means
(higher PWM rolls right). A rover: while it moves forward, more steering PWM turns right
(a falling yaw rate in FLU), apart from what SERVO3 does (throttle, or a skid-steer's
right side: its SERVO1 is the left); reversing flips it.
"""

import math
from typing import Dict, Optional, Tuple

import numpy as np

from ardupilot_json_bridge.checks.verdicts import Check, OK, UNDECIDED, WRONG

NAME = 'layout: what SITL mixes for'
# ArduPilot's libraries/AP_Motors/AP_MotorsMatrix.cpp, setup_motors(), MOTOR_FRAME_QUAD: per
# SERVO channel add_motor(n, angle from the nose in deg, yaw factor), where add_motor gives
# roll factor cos(angle + 90 deg) and pitch factor cos(angle); AP_MOTORS_MATRIX_YAW_FACTOR_CCW
# is +1, _CW -1. FRAME_TYPE numbers from AP_Motors_Class.h (motor_frame_type).
QUAD_LAYOUTS: Dict[str, Tuple[int, Tuple[Tuple[float, float], ...]]] = {
    'PLUS': (0, ((90.0, 1.0), (-90.0, 1.0), (0.0, -1.0), (180.0, -1.0))),
    'X': (1, ((45.0, 1.0), (-135.0, 1.0), (-45.0, -1.0), (135.0, -1.0))),
    'H': (3, ((45.0, -1.0), (-135.0, -1.0), (-45.0, 1.0), (135.0, 1.0))),
}
# The layouts SITL's roll and pitch control tells apart.
ROLL_PITCH_LAYOUTS = ('PLUS', 'X')
# The one each layout mixes roll and pitch as: an H is an X with its yaw reversed.
ROLL_PITCH_OF = {'PLUS': 'PLUS', 'X': 'X', 'H': 'X'}
# Motors' PWM above which the copter is flying (us), and the seconds of it needed.
FLYING_PWM = 1150.0
MIN_FLYING = 3.0
# Bins (s) the PWM and the rates are averaged over; motor lags tried (bins).
BIN = 0.01
LAGS = range(0, 8)
# Bins of the moving mean the controller fit takes out (the targets' slow motion).
HIGH_PASS = 15
# A fit names a layout when its axes cross by at most CLEAR, and every other's by at least
# AMBIGUOUS (as a fraction of the own axis).
CLEAR = 0.35
AMBIGUOUS = 0.6
# A plane's or a rover's channel decides once it moves this much (PWM RMS about its median).
MIN_DEFLECTION = 20.0
# A rover decides while moving at least this fast (m/s).
MIN_ROVER_SPEED = 0.5
# The share of the yaw rate (or roll acceleration) a channel's sign must explain.
MIN_CORRELATION = 0.3


def quad_factors(layout: str) -> np.ndarray:
    """Return the (4, 3) roll, pitch and yaw factors of a QUAD layout, in SERVO order."""
    return np.array([[math.cos(math.radians(angle + 90.0)), math.cos(math.radians(angle)), yaw]
                     for angle, yaw in QUAD_LAYOUTS[layout][1]])


def binned(stamps: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Return the mean of values (n, k) in each bin between edges (NaN where none falls)."""
    index = np.searchsorted(edges, stamps, side='right') - 1
    inside = (index >= 0) & (index < len(edges) - 1)
    sums = np.zeros((len(edges) - 1, values.shape[1]))
    counts = np.zeros(len(edges) - 1)
    np.add.at(sums, index[inside], values[inside])
    np.add.at(counts, index[inside], 1.0)
    with np.errstate(invalid='ignore', divide='ignore'):
        return sums / counts[:, None]


def crossing(matrix: np.ndarray, sign: float) -> float:
    """
    Return how much a square matrix's rows cross axes: max off-diagonal / diagonal entry.

    The diagonal must have the given sign (+1: each demand drives its own axis, -1: each
    demand opposes its own rate); a row whose diagonal has the other sign crosses infinitely.
    """
    worst = 0.0
    for i, row in enumerate(matrix):
        own = sign * row[i]
        if own <= 0:
            return math.inf
        worst = max(worst, float(np.max(np.abs(np.delete(row, i)), initial=0.0)) / own)
    return worst


def named(scores: Dict[str, float]) -> Optional[str]:
    """Return the layout that alone fits clearly, or None."""
    ranked = sorted(scores, key=scores.get)
    if scores[ranked[0]] <= CLEAR and all(scores[o] >= AMBIGUOUS for o in ranked[1:]):
        return ranked[0]
    return None


def scores_text(scores: Dict[str, float]) -> str:
    """Return the scores, best first ('-' for a layout that does not fit at all)."""
    return ', '.join(f'{name} {value:.2f}' if math.isfinite(value) else f'{name} -'
                     for name, value in sorted(scores.items(), key=lambda item: item[1]))


def copter_check(pwm_stamps: np.ndarray, pwm: np.ndarray, gyro_stamps: np.ndarray,
                 gyro: np.ndarray, attitude: Tuple[np.ndarray, np.ndarray]) -> Check:
    """
    Name SITL's and the vehicle's QUAD layouts from the motors' PWM and the FLU gyro.

    attitude: (stamps, FRD roll and pitch in rad) for the controller fit.
    """
    if pwm.shape[1] < 4:
        return Check(NAME, UNDECIDED, f'{pwm.shape[1]} PWM channels: a quad needs 4')
    motors = pwm[:, :4].astype(float)
    flying = np.all(motors > 900.0, axis=1) & (motors.mean(axis=1) > FLYING_PWM)
    flown = float(np.sum(np.diff(pwm_stamps)[flying[1:]])) if len(pwm_stamps) > 1 else 0.0
    if flown < MIN_FLYING:
        return Check(NAME, UNDECIDED, f'{flown:.1f} s with the motors above {FLYING_PWM:.0f} '
                                      f'us: fly for {MIN_FLYING:.0f} s or more to decide')
    edges = np.arange(pwm_stamps[0], pwm_stamps[-1], BIN)
    differences = motors - motors.mean(axis=1, keepdims=True)
    demands = binned(pwm_stamps[flying], differences[flying], edges)
    rates = binned(gyro_stamps, gyro * [1.0, -1.0, -1.0], edges)
    acceleration = np.gradient(rates, BIN, axis=0)
    plant = plant_fit(demands, acceleration)
    if plant is None:
        return Check(NAME, UNDECIDED, 'too few flying samples with rates beside them')
    vehicle_scores = {name: crossing(plant @ quad_factors(name), 1.0) for name in QUAD_LAYOUTS}
    angles = np.stack([np.interp(edges[:-1] + BIN / 2, attitude[0], attitude[1][:, i])
                       for i in range(2)], axis=1)
    # The controller's yaw follows the yaw targets too closely to show its sign: SITL's side
    # is judged on roll and pitch, which tells a PLUS from an X (an H mixes as an X there).
    sitl_scores = {name: controller_crossing(demands, rates, angles, name)
                   for name in ROLL_PITCH_LAYOUTS}
    measured = (f'axes crossed by the body (lower fits): {scores_text(vehicle_scores)}; by '
                f"SITL's roll and pitch control: {scores_text(sitl_scores)}")
    return quad_verdict(named(vehicle_scores), named(sitl_scores), measured)


def quad_verdict(vehicle: Optional[str], sitl: Optional[str], measured: str) -> Check:
    """
    Judge the layout the vehicle responds as against the one SITL mixes roll and pitch as.

    Only roll and pitch can disagree: an H is an X with its yaw reversed, and neither SITL's
    yaw demands nor a body's yaw answer in a closed loop shows a reliable sign.
    """
    if vehicle is None or sitl is None:
        return Check(NAME, UNDECIDED, measured + ': no single QUAD layout fits both')
    if ROLL_PITCH_OF[sitl] != ROLL_PITCH_OF[vehicle]:
        # Advised by roll and pitch only: the body's yaw answer does not tell an H from an X.
        advised = ROLL_PITCH_OF[vehicle]
        return Check(NAME, WRONG, f'SITL mixes for QUAD/{sitl}, the vehicle responds as '
                                  f'QUAD/{vehicle} ({measured})',
                     f'set FRAME_CLASS 1 and FRAME_TYPE {QUAD_LAYOUTS[advised][0]} '
                     f"(QUAD/{advised}) in SITL's parameters, or give the vehicle the "
                     f'motor order of QUAD/{sitl}')
    if vehicle != sitl:
        return Check(NAME, UNDECIDED, f'the vehicle responds as QUAD/{vehicle}, SITL mixes '
                                      f'roll and pitch as QUAD/{sitl}: its yaw direction is not '
                                      f'judged ({measured})')
    return Check(NAME, OK, f'SITL mixes for QUAD/{sitl}, the vehicle responds as '
                           f'QUAD/{vehicle} ({measured})')


def plant_fit(demands: np.ndarray, acceleration: np.ndarray) -> Optional[np.ndarray]:
    """Return the (3, 4) map from the motors' PWM differences to FRD angular acceleration."""
    best: Optional[Tuple[float, np.ndarray]] = None
    for lag in LAGS:
        x = demands[:len(demands) - lag]
        y = acceleration[lag:]
        rows = np.all(np.isfinite(x), axis=1) & np.all(np.isfinite(y), axis=1)
        if np.sum(rows) < 50:
            continue
        design = np.hstack([x[rows], np.ones((int(np.sum(rows)), 1))])
        spread = float(np.sum((y[rows] - y[rows].mean(axis=0)) ** 2))
        if not spread > 0.0:  # the body never accelerates: nothing to fit
            continue
        solution, *_ = np.linalg.lstsq(design, y[rows], rcond=None)
        residual = float(np.sum((design @ solution - y[rows]) ** 2)) / spread
        if best is None or residual < best[0]:
            best = (residual, solution[:4].T)
    return None if best is None else best[1]


def controller_crossing(differences: np.ndarray, rates: np.ndarray, angles: np.ndarray,
                        layout: str) -> float:
    """
    Return how much a layout's demands cross axes against the rates and tilts they oppose.

    ArduCopter's demand on an axis is its rate controller's: against that axis's rate and,
    through the angle controller, its tilt. All are high-passed first: the pilot's or the
    navigation's targets move slowly, the controller answers every quick turn of the body.
    """
    demands = high_passed(differences @ np.linalg.pinv(quad_factors(layout)).T)
    state = high_passed(np.hstack([rates, angles]))
    rows = np.all(np.isfinite(demands), axis=1) & np.all(np.isfinite(state), axis=1)
    if np.sum(rows) < 50:
        return math.inf
    scale = np.std(state[rows], axis=0)
    if not np.all(scale > 0):
        return math.inf
    design = np.hstack([state[rows] / scale, np.ones((int(np.sum(rows)), 1))])
    solution, *_ = np.linalg.lstsq(design, demands[rows], rcond=None)
    # What each rate and tilt contributes to each demand, in the demand's units.
    gains = solution[:5].T
    rate_and_tilt = gains[:2, :3] + np.hstack([gains[:2, 3:5], np.zeros((2, 1))])
    return crossing(rate_and_tilt[:, :2], -1.0)


def high_passed(values: np.ndarray) -> np.ndarray:
    """Return values (bins, k) less their moving mean over HIGH_PASS bins (NaN stays NaN)."""
    kernel = np.ones(HIGH_PASS) / HIGH_PASS
    finite = np.where(np.isfinite(values), values, 0.0)
    weight = np.convolve(np.isfinite(values[:, 0]).astype(float), kernel, mode='same')
    with np.errstate(invalid='ignore', divide='ignore'):
        means = np.stack([np.convolve(finite[:, i], kernel, mode='same') / weight
                          for i in range(values.shape[1])], axis=1)
    return values - means


def sign_check(name: str, channel: np.ndarray, response: np.ndarray, expected: str,
               fix: str) -> Tuple[Check, float]:
    """
    Judge whether a channel's PWM away from its median drives a response the way expected.

    response is what a positive deflection should raise. Wrong only when the sign is clearly
    the other way: the correlation beyond MIN_CORRELATION. Returns the verdict and the
    correlation (0 when undecided for want of motion).
    """
    deflection = channel - np.median(channel)
    spread = float(np.sqrt(np.mean(deflection ** 2))) if len(deflection) else 0.0
    if spread < MIN_DEFLECTION or len(deflection) < 50 or not np.std(response) > 0:
        return Check(NAME, UNDECIDED, f'{name}: PWM moves {spread:.0f} us RMS over '
                                      f'{len(deflection)} samples: too little to decide'), 0.0
    correlation = float(np.corrcoef(deflection, response)[0, 1])
    measured = f'{name}: correlation {correlation:+.2f} with {expected}'
    if correlation <= -MIN_CORRELATION:
        return Check(NAME, WRONG, measured + ': reversed', fix), correlation
    if correlation >= MIN_CORRELATION:
        return Check(NAME, OK, measured), correlation
    return Check(NAME, UNDECIDED, measured + ': too weak to decide'), correlation


def plane_check(pwm_stamps: np.ndarray, pwm: np.ndarray, gyro_stamps: np.ndarray,
                gyro: np.ndarray) -> Check:
    """Judge whether the aileron (SERVO1, ArduPlane's default) rolls right for more PWM."""
    edges = np.arange(pwm_stamps[0], pwm_stamps[-1], BIN)
    aileron = binned(pwm_stamps, pwm[:, :1].astype(float), edges)[:, 0]
    roll_rate = binned(gyro_stamps, gyro[:, :1], edges)[:, 0]
    # FLU roll is FRD roll: positive rolls right. The surface moves the roll acceleration,
    # taken a motor or servo lag later (the lag that correlates best).
    acceleration = np.gradient(roll_rate, BIN)
    verdicts = []
    for lag in LAGS:
        x, y = aileron[:len(aileron) - lag], acceleration[lag:]
        rows = np.isfinite(x) & np.isfinite(y)
        verdicts.append(sign_check(
            'SERVO1 (aileron)', x[rows], y[rows], 'the roll acceleration',
            "reverse the aileron: SERVO1_REVERSED in SITL, or the sign of the model's aileron "
            'joint (higher PWM must roll right)'))
    return max(verdicts, key=lambda verdict: abs(verdict[1]))[0]


def rover_check(pwm_stamps: np.ndarray, pwm: np.ndarray, gyro_stamps: np.ndarray,
                gyro: np.ndarray, odometry_stamps: np.ndarray, forward: np.ndarray) -> Check:
    """Judge whether more steering PWM (SERVO1, ArduRover's default) turns right, moving."""
    steering = pwm[:, 0].astype(float)
    yaw_rate = np.interp(pwm_stamps, gyro_stamps, gyro[:, 2])
    speed = np.interp(pwm_stamps, odometry_stamps, forward)
    moving = np.abs(speed) > MIN_ROVER_SPEED
    if np.sum(moving) < 50:
        return Check(NAME, UNDECIDED, f'SERVO1 (steering): moving faster than '
                                      f'{MIN_ROVER_SPEED} m/s in {int(np.sum(moving))} frames: '
                                      'drive to decide')
    # Right is a falling FLU yaw rate going forward, a rising one in reverse.
    response = -yaw_rate[moving] * np.sign(speed[moving])
    deflection = steering[moving]
    if pwm.shape[1] >= 3:
        # SERVO3 (throttle, or a skid-steer's right side) taken out of both: a skid-steer's
        # SERVO1 is its left side, whose share in a turn is what it does apart from SERVO3.
        deflection, response = apart_from(pwm[moving, 2].astype(float), deflection, response)
    return sign_check('SERVO1 (steering)', deflection, response, 'turning right',
                      'reverse the steering: SERVO1_REVERSED in SITL, or the sign of the '
                      "model's steering joints (higher PWM must turn right)")[0]


def apart_from(other: np.ndarray, *series: np.ndarray) -> Tuple[np.ndarray, ...]:
    """Return each series less its least-squares fit on other (and a constant)."""
    design = np.stack([other, np.ones(len(other))], axis=1)
    return tuple(values - design @ np.linalg.lstsq(design, values, rcond=None)[0]
                 for values in series)


def layout_check(vehicle: Optional[str], pwm: np.ndarray, imu: np.ndarray,
                 odometry: np.ndarray, attitude: np.ndarray, forward: np.ndarray) -> Check:
    """
    Return the layout verdict of a window of samples.

    PWM rows (stamp, channels...), IMU rows (stamp, gyro, accel), odometry rows (stamp,
    position, x-y-z-w, twist), FRD roll and pitch (rad) and the speed along the body's x axis
    (m/s) at the odometry stamps. vehicle:
    'copter', 'plane', 'rover' or None (a copter's layouts are tried, and a vehicle none fits
    is left undecided).
    """
    if len(pwm) < 50:
        return Check(NAME, UNDECIDED, f'{len(pwm)} PWM frames: record servo_pwm to decide')
    stamps, channels = pwm[:, 0], pwm[:, 1:]
    if vehicle == 'plane':
        return plane_check(stamps, channels, imu[:, 0], imu[:, 1:4])
    if vehicle == 'rover':
        return rover_check(stamps, channels, imu[:, 0], imu[:, 1:4], odometry[:, 0], forward)
    check = copter_check(stamps, channels, imu[:, 0], imu[:, 1:4],
                         (odometry[:, 0], attitude))
    if vehicle is None and check.verdict == UNDECIDED:
        return Check(NAME, UNDECIDED, check.measured + ' (a plane or a rover: name the '
                                                       'vehicle to check its surfaces)')
    return check
