"""Which topic feeds which input: one table for the ROS node and the bag replay alike."""

from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional

from ardupilot_json_bridge.checks.conventions import ConventionChecker, observe_imu, \
    observe_odometry
from ardupilot_json_bridge.config import BridgeConfig, LASER_SCAN
from ardupilot_json_bridge.core.ratelimit import RateLimitedLog
from ardupilot_json_bridge.core.samples import InvalidSample
from ardupilot_json_bridge.core.state import (
    AIRSPEED, BATTERY, IMU, ODOMETRY, rangefinder_name, RC, SensorState, WIND)
from ardupilot_json_bridge.messages import cdr, inputs

IMU_TYPE = 'sensor_msgs/msg/Imu'
ODOMETRY_TYPE = 'nav_msgs/msg/Odometry'
RANGE_TYPE = 'sensor_msgs/msg/Range'
LASER_SCAN_TYPE = 'sensor_msgs/msg/LaserScan'
WIND_TYPE = 'geometry_msgs/msg/Vector3Stamped'
AIRSPEED_TYPE = 'std_msgs/msg/Float64'
BATTERY_TYPE = 'sensor_msgs/msg/BatteryState'
RC_TYPE = 'sensor_msgs/msg/Joy'
# What a convention checker reads of each type: (checker, message, stamp).
CONVENTION_OBSERVERS: Dict[str, Callable[[ConventionChecker, Any, float], None]] = {
    IMU_TYPE: observe_imu, ODOMETRY_TYPE: observe_odometry}
# The fast topics, which the node takes serialized and the link process decodes.
SERIALIZED_DECODERS: Dict[str, Callable[[bytes], Any]] = {
    IMU_TYPE: cdr.decode_imu, ODOMETRY_TYPE: cdr.decode_odometry}


@dataclass(frozen=True)
class InputRoute:
    """
    One subscribed topic: its message type, its conversion and the state input it feeds.

    convert takes the message and the time it was received (the stamp used when the message
    has none, or a zero one).
    """

    name: str
    topic: str
    msgtype: str
    convert: Callable[[Any, float], Any]
    push: Callable[[Any], None]
    mandatory: bool = False


def input_routes(config: BridgeConfig, state: SensorState) -> List[InputRoute]:
    """Return the routes a configuration asks for, mandatory ones first."""
    settings = config.inputs
    mounting = inputs.imu_mounting(*settings.imu_mounting_rpy)
    in_child_frame = settings.odom_twist_frame == 'child'
    routes = [InputRoute(ODOMETRY, settings.odom_topic, ODOMETRY_TYPE,
                         lambda m, _: inputs.odometry_to_sample(m, in_child_frame),
                         state.push_odometry, mandatory=True)]
    if not config.state.odometry_only:
        routes.append(InputRoute(IMU, settings.imu_topic, IMU_TYPE,
                                 lambda m, _: inputs.imu_to_sample(m, mounting),
                                 state.push_imu, mandatory=True))
    for index, (topic, kind) in enumerate(settings.rangefinders):
        scan = kind == LASER_SCAN
        routes.append(InputRoute(
            rangefinder_name(index), topic, LASER_SCAN_TYPE if scan else RANGE_TYPE,
            (lambda m, _: inputs.laser_scan_to_sample(m)) if scan else (
                lambda m, _: inputs.range_to_sample(m)),
            lambda sample, i=index: state.push_range(i, sample)))
    optional = (
        (WIND, settings.wind_topic, WIND_TYPE, lambda m, _: inputs.wind_to_sample(m),
         state.push_wind),
        (AIRSPEED, settings.airspeed_topic, AIRSPEED_TYPE, inputs.airspeed_to_sample,
         state.push_airspeed),
        (BATTERY, settings.battery_topic, BATTERY_TYPE,
         lambda m, _: inputs.battery_to_sample(m), state.push_battery),
        (RC, settings.rc_topic, RC_TYPE, lambda m, _: inputs.joy_to_rc(m), state.push_rc),
    )
    routes += [InputRoute(*entry) for entry in optional if entry[1]]
    return routes


def serialized(route: InputRoute,
               observe: Optional[Callable[[Any], None]] = None) -> InputRoute:
    """
    Return the route taking its messages as CDR bytes (a SERIALIZED_DECODERS type).

    observe, if given, sees each decoded message before it is converted (the live checks).
    """
    decode, convert = SERIALIZED_DECODERS[route.msgtype], route.convert
    if observe is None:
        return replace(route, convert=lambda data, received: convert(decode(data), received))

    def observed(data: bytes, received: float) -> Any:
        message = decode(data)
        observe(message)
        return convert(message, received)
    return replace(route, convert=observed)


def deliver(route: InputRoute, message: Any, received: float, state: SensorState,
            warnings: RateLimitedLog, stamp_offset: float = 0.0) -> bool:
    """
    Convert a message and push it; a bad message is counted and reported, not raised.

    received stamps messages that carry no header; stamp_offset shifts the stamp (a looping
    replay).
    """
    try:
        sample = route.convert(message, received)
    except (InvalidSample, ValueError, TypeError, AttributeError) as error:
        state.count_rejected(route.name)
        warnings.warning(f'invalid:{route.name}', f'ignored a {route.msgtype} message on '
                                                  f'{route.topic}: {error}')
        return False
    if stamp_offset:
        sample = replace(sample, stamp=sample.stamp + stamp_offset)
    route.push(sample)
    return True
