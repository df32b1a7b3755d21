"""The example Gazebo world, its ros_gz_bridge config and the quad preset agree."""

import os
import xml.etree.ElementTree as ElementTree

import pytest
import yaml

from ardupilot_json_bridge.config import config_from_parameters, load_parameters_file
from ardupilot_json_bridge.sources.replay import resolve_topic

CONFIG = os.path.join(os.path.dirname(__file__), '..', 'config')
NAMESPACE = 'quad'


@pytest.fixture(scope='module')
def world():
    return ElementTree.parse(os.path.join(CONFIG, 'worlds', 'quad_x.sdf')).getroot()


@pytest.fixture(scope='module')
def bridge_topics():
    with open(os.path.join(CONFIG, 'gz_bridge_quad.yaml')) as stream:
        return {entry['ros_topic_name']: entry for entry in yaml.safe_load(stream)}


@pytest.fixture(scope='module')
def preset():
    return config_from_parameters(load_parameters_file(os.path.join(CONFIG, 'quad_x.yaml')))


def plugins(element, name):
    return [p for p in element.iter('plugin') if p.get('name') == name]


def test_world_runs_physics_at_1khz_with_sensors_that_need_no_rendering(world):
    assert world.get('version') == '1.9'
    assert float(world.find('world/physics/max_step_size').text) == 0.001
    for system in ('Physics', 'Imu', 'SceneBroadcaster'):
        assert plugins(world, f'gz::sim::systems::{system}'), system
    # The Sensors system is for rendering sensors (cameras, lidars): it needs a render engine,
    # which a headless Gazebo (CI's, a container's) lacks; the IMU and odometry need none.
    assert not plugins(world, 'gz::sim::systems::Sensors')


def test_imu_reports_enu_orientation_at_1khz(world):
    (imu,) = [s for s in world.iter('sensor') if s.get('type') == 'imu']
    assert imu.find('imu/orientation_reference_frame/localization').text == 'ENU'
    assert float(imu.find('update_rate').text) >= 1000
    assert imu.find('topic').text == '/quad/imu'


def test_odometry_publisher_has_three_dimensions_at_a_high_rate(world):
    (odometry,) = plugins(world, 'gz::sim::systems::OdometryPublisher')
    assert odometry.find('dimensions').text == '3'
    assert float(odometry.find('odom_publish_frequency').text) >= 200
    assert odometry.find('odom_topic').text == '/quad/odometry'


def test_motors_follow_arducopter_quad_x(world):
    motors = plugins(world, 'gz::sim::systems::MulticopterMotorModel')
    assert [int(m.find('motorNumber').text) for m in motors] == [0, 1, 2, 3]
    assert [m.find('turningDirection').text for m in motors] == ['ccw', 'ccw', 'cw', 'cw']
    poses = {link.get('name'): [float(v) for v in link.find('pose').text.split()[:2]]
             for link in world.iter('link') if link.get('name', '').startswith('rotor_')}
    # front right, rear left, front left, rear right in FLU
    signs = [(1, -1), (-1, 1), (1, 1), (-1, -1)]
    for index, (sx, sy) in enumerate(signs):
        x, y = poses[f'rotor_{index}']
        assert (x * sx > 0, y * sy > 0) == (True, True)
    for motor in motors:
        assert motor.find('robotNamespace').text == NAMESPACE
        assert motor.find('commandSubTopic').text == 'command/motor_speed'
        assert float(motor.find('maxRotVelocity').text) == 838


def test_bridge_config_connects_world_and_preset(world, bridge_topics, preset):
    assert bridge_topics['/clock']['direction'] == 'GZ_TO_ROS'
    imu = bridge_topics[resolve_topic(NAMESPACE, preset.inputs.imu_topic)]
    assert (imu['gz_topic_name'], imu['direction']) == ('/quad/imu', 'GZ_TO_ROS')
    odom = bridge_topics[resolve_topic(NAMESPACE, preset.inputs.odom_topic)]
    assert (odom['gz_topic_name'], odom['ros_type_name']) == ('/quad/odometry',
                                                              'nav_msgs/msg/Odometry')
    (motors,) = preset.outputs
    command = bridge_topics[resolve_topic(NAMESPACE, motors.topic)]
    assert command['direction'] == 'ROS_TO_GZ'
    assert command['gz_type_name'] == 'gz.msgs.Actuators'
    assert command['gz_topic_name'] == '/quad/command/motor_speed'
    assert preset.inputs.imu_mounting_rpy == (0.0, 0.0, 0.0)
