"""
The example Gazebo world, its ros_gz_bridge config and the quad preset agree.

So do gazebo_fleet.launch.py's worlds (quad_x.sdf's quad once per vehicle) and bridge
configurations: each vehicle's model is the quad with topics of its own, bridged to its
namespace, where the bridge with the preset reads and writes them.
"""

import os
import xml.etree.ElementTree as ElementTree

import pytest
import yaml

from ardupilot_json_bridge.config import config_from_parameters, load_parameters_file
from ardupilot_json_bridge.ros.launch_config import (
    fleet, fleet_world, gazebo_bridge_topics, LaunchArgumentError, write_gazebo_fleet)
from ardupilot_json_bridge.sources.replay import resolve_topic

CONFIG = os.path.join(os.path.dirname(__file__), '..', 'config')
WORLD = os.path.join(CONFIG, 'worlds', 'quad_x.sdf')
PRESET = os.path.join(CONFIG, 'quad_x.yaml')
NAMESPACE = 'quad'
# gazebo_fleet.launch.py's vehicles (count, namespace_prefix, first_instance) and where each
# model starts (ENU x, y, z; 3 m apart northwards, origins on the ground as quad_x.sdf's).
FLEETS = [('2', 'vehicle', '0', [(0, 0, 0), (0, 3, 0)]),
          ('3', '/fleet/uav/', '5', [(0, 0, 0), (0, 3, 0), (0, 6, 0)]),
          ('1', 'vehicle', '7', [(0, 0, 0)])]


@pytest.fixture(scope='module')
def world():
    return ElementTree.parse(WORLD).getroot()


@pytest.fixture(scope='module')
def bridge_topics():
    with open(os.path.join(CONFIG, 'gz_bridge_quad.yaml')) as stream:
        return {entry['ros_topic_name']: entry for entry in yaml.safe_load(stream)}


@pytest.fixture(scope='module', params=FLEETS, ids=['2xvehicle', '3xfleet_uav', '1xvehicle7'])
def fleet_files(request, tmp_path_factory):
    """gazebo_fleet.launch.py's world (parsed), its bridge entries and its namespaces."""
    count, prefix, first, poses = request.param
    namespaces = [vehicle.namespace for vehicle in fleet(count, prefix, first)]
    world_file, bridge_file = write_gazebo_fleet(WORLD, 'quad', namespaces, PRESET,
                                                 str(tmp_path_factory.mktemp('fleet')))
    with open(bridge_file) as stream:
        entries = yaml.safe_load(stream)
    return ElementTree.parse(world_file).getroot(), entries, namespaces, poses


@pytest.fixture(scope='module')
def preset():
    return config_from_parameters(load_parameters_file(PRESET))


def plugins(element, name):
    return [p for p in element.iter('plugin') if p.get('name') == name]


def vehicle_models(world):
    """Return a world's models but the ground: the fleet's vehicles."""
    return [m for m in world.iter('model') if m.get('name') != 'ground_plane']


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


def test_the_shipped_bridge_config_is_what_gazebo_bridge_topics_writes_for_the_quad():
    with open(os.path.join(CONFIG, 'gz_bridge_quad.yaml')) as stream:
        assert yaml.safe_load(stream) == gazebo_bridge_topics([NAMESPACE], PRESET)


def gz_topics(model: ElementTree.Element) -> dict:
    """Return the Gazebo topics a model's IMU, odometry and motors use, read from its SDF."""
    (imu,) = [s for s in model.iter('sensor') if s.get('type') == 'imu']
    (odometry,) = plugins(model, 'gz::sim::systems::OdometryPublisher')
    # MulticopterMotorModel subscribes to /<robotNamespace>/<commandSubTopic>.
    commands = {f"/{m.find('robotNamespace').text}/{m.find('commandSubTopic').text}"
                for m in plugins(model, 'gz::sim::systems::MulticopterMotorModel')}
    (command,) = commands
    return {'imu': imu.find('topic').text, 'odom': odometry.find('odom_topic').text,
            'command': command}


def test_each_fleet_vehicle_is_the_quad_with_topics_of_its_own(fleet_files, world, preset):
    generated, entries, namespaces, _ = fleet_files
    (template,) = world.findall("world/model[@name='quad']")
    models = vehicle_models(generated)
    assert [m.get('name') for m in models] == [n.replace('/', '_') for n in namespaces]
    # The rest of the world is quad_x.sdf's: physics, systems, ground.
    assert [e.tag for e in generated.find('world') if e.tag != 'model'] == \
        [e.tag for e in world.find('world') if e.tag != 'model']
    bridged = {e['ros_topic_name']: e for e in entries}
    assert bridged['/clock']['gz_topic_name'] == '/clock'
    assert len(entries) == 1 + 3 * len(namespaces)
    seen = []
    for model, namespace in zip(models, namespaces):
        # The same model: as many elements, the same links and joints where they were.
        assert len(list(model.iter())) == len(list(template.iter()))
        assert [(e.tag, e.get('name'), e.findtext('pose')) for e in model.iter('link')] == \
            [(e.tag, e.get('name'), e.findtext('pose')) for e in template.iter('link')]
        topics = gz_topics(model)
        assert topics == {'imu': f'/{namespace}/imu', 'odom': f'/{namespace}/odometry',
                          'command': f'/{namespace}/command/motor_speed'}
        seen += topics.values()
        # Bridged to where the bridge with the preset reads and writes in its namespace.
        (motors,) = preset.outputs
        for kind, ros_topic in (('imu', preset.inputs.imu_topic),
                                ('odom', preset.inputs.odom_topic), ('command', motors.topic)):
            entry = bridged[resolve_topic(namespace, ros_topic)]
            assert entry['gz_topic_name'] == topics[kind]
            assert entry['direction'] == ('ROS_TO_GZ' if kind == 'command' else 'GZ_TO_ROS')
        (odometry,) = plugins(model, 'gz::sim::systems::OdometryPublisher')
        assert odometry.find('odom_frame').text == f'{namespace}/odom'
        assert odometry.find('robot_base_frame').text == f'{namespace}/base_link'
    assert len(seen) == len(set(seen)), seen


def test_fleet_vehicles_start_apart_on_the_ground(fleet_files):
    generated, _, _, poses = fleet_files
    starts = [tuple(float(v) for v in m.find('pose').text.split())
              for m in vehicle_models(generated)]
    assert starts == [pose + (0, 0, 0) for pose in poses]


@pytest.mark.parametrize('text, message', [
    (None, 'needs an SDF world file it can read'),
    ('<sdf><world name="w"><model name="other"/></world></sdf>', 'has no <model name="quad">'),
    ('<sdf><model name="quad"/></sdf>', 'has no <model name="quad">'),
    ('<sdf><world name="w">', 'needs an SDF world file it can read')])
def test_a_fleet_needs_a_world_with_the_model(tmp_path, text, message):
    template = tmp_path / 'world.sdf'
    if text is not None:
        template.write_text(text)
    with pytest.raises(LaunchArgumentError, match=message) as error:
        write_gazebo_fleet(str(template), 'quad', ['vehicle0'], PRESET, str(tmp_path))
    assert '\n' not in str(error.value)


def edited(tmp_path, old: str, new: str, source: str = WORLD) -> str:
    """Return the path of a copy of source with its first old replaced by new."""
    with open(source) as stream:
        text = stream.read()
    assert old in text
    path = tmp_path / os.path.basename(source)
    path.write_text(text.replace(old, new, 1))
    return str(path)


def test_fleet_world_moves_only_the_template_pose_y_exactly(tmp_path):
    template = edited(tmp_path, '<pose>0 0 0 0 0 0</pose>',
                      '<pose>1234.56789 -0.000123456789 0.1 0 0 1.5707963268</pose>')
    first, second = vehicle_models(ElementTree.fromstring(
        fleet_world(template, 'quad', ['vehicle0', 'vehicle1'])))
    assert first.findtext('pose') == '1234.56789 -0.000123456789 0.1 0 0 1.5707963268'
    assert second.findtext('pose') == \
        f'1234.56789 {-0.000123456789 + 3.0!r} 0.1 0 0 1.5707963268'


def test_topics_scoped_by_the_model_inside_a_path_are_rescoped_too(tmp_path):
    template = edited(tmp_path, '<odom_topic>/quad/odometry</odom_topic>',
                      '<odom_topic>/model/quad/odometry</odom_topic>')
    topics = [m.findtext('.//odom_topic') for m in vehicle_models(ElementTree.fromstring(
        fleet_world(template, 'quad', ['vehicle0', 'fleet/uav1'])))]
    assert topics == ['/model/vehicle0/odometry', '/model/fleet_uav1/odometry']


@pytest.mark.parametrize('reference, named', [
    ('<frame name="chase_cam" attached_to="quad"><pose>-3 0 2 0 0 0</pose></frame>',
     '<frame name="chase_cam"> attached_to="quad"'),
    ('<light type="point" name="lamp"><pose relative_to="quad::base_link">0 0 1 0 0 0</pose>'
     '</light>', '<pose> relative_to="quad::base_link" in <light name="lamp">'),
    ('<joint name="tether" type="fixed"><parent>world</parent><child>quad</child></joint>',
     '<child> text \'quad\' in <joint name="tether">')],
    ids=['attached_to', 'relative_to', 'joint_child'])
def test_a_world_element_referring_to_the_template_model_is_a_launch_error(tmp_path, reference,
                                                                           named):
    template = edited(tmp_path, '<model name="ground_plane">',
                      f'{reference}\n    <model name="ground_plane">')
    with pytest.raises(LaunchArgumentError, match='refers to it') as error:
        fleet_world(template, 'quad', ['vehicle0', 'vehicle1'])
    assert named in str(error.value) and '\n' not in str(error.value)


@pytest.mark.parametrize('model', ["it's", 'a"b', 'a]b'])
def test_a_model_name_with_quotes_or_brackets_is_only_a_model_not_found(model):
    with pytest.raises(LaunchArgumentError, match='has no <model name=') as error:
        fleet_world(WORLD, model, ['vehicle0'])
    assert '\n' not in str(error.value)


@pytest.mark.parametrize('pose', ['0 0 zero 0 0 0', '0 0 0'], ids=['word', 'three'])
def test_a_bad_template_pose_is_a_launch_error_naming_the_world(tmp_path, pose):
    template = edited(tmp_path, '<pose>0 0 0 0 0 0</pose>', f'<pose>{pose}</pose>')
    with pytest.raises(LaunchArgumentError, match='<pose>') as error:
        fleet_world(template, 'quad', ['vehicle0'])
    assert template in str(error.value) and '\n' not in str(error.value)


def test_the_fleet_bridge_yaml_follows_the_params_file(tmp_path):
    params = edited(tmp_path, 'odom_topic: odom', 'odom_topic: /shared/odometry', PRESET)
    params = edited(tmp_path, 'imu_topic: imu', 'imu_topic: sensors/imu', params)
    params = edited(tmp_path, 'topic: command/motor_speed', 'topic: motors/speed', params)
    entries = {e['gz_topic_name']: e for e in gazebo_bridge_topics(['vehicle0'], params)}
    preset = config_from_parameters(load_parameters_file(params, namespace='vehicle0'))
    (motors,) = preset.outputs
    assert entries['/vehicle0/imu']['ros_topic_name'] == \
        resolve_topic('vehicle0', preset.inputs.imu_topic) == '/vehicle0/sensors/imu'
    assert entries['/vehicle0/odometry']['ros_topic_name'] == '/shared/odometry'
    assert entries['/vehicle0/command/motor_speed']['ros_topic_name'] == \
        resolve_topic('vehicle0', motors.topic) == '/vehicle0/motors/speed'


@pytest.mark.parametrize('old, new', [('odom_topic: odom', 'odom_topic: /odom'),
                                      ('imu_topic: imu', 'imu_topic: odom')],
                         ids=['absolute', 'imu_on_odom'])
def test_a_ros_topic_two_entries_would_share_is_one_launch_error(tmp_path, old, new):
    params = edited(tmp_path, old, new, PRESET)
    with pytest.raises(LaunchArgumentError, match='would carry the topics of more') as error:
        gazebo_bridge_topics(['vehicle0', 'vehicle1'], params)
    assert '\n' not in str(error.value)


def test_a_vehicle_of_its_own_in_the_params_file_gets_its_own_topics(tmp_path):
    params = tmp_path / 'params.yaml'
    with open(PRESET) as stream:
        params.write_text(stream.read() + '/vehicle1/json_sitl_bridge:\n  ros__parameters:\n'
                          '    odom_topic: odometry\n')
    entries = {e['gz_topic_name']: e['ros_topic_name']
               for e in gazebo_bridge_topics(['vehicle0', 'vehicle1'], str(params))}
    assert entries['/vehicle0/odometry'] == '/vehicle0/odom'
    assert entries['/vehicle1/odometry'] == '/vehicle1/odometry'


def test_odometry_only_bridges_no_imu(tmp_path):
    params = edited(tmp_path, 'imu_topic: imu', "imu_topic: ''\n    odometry_only: true", PRESET)
    assert [e['gz_topic_name'] for e in gazebo_bridge_topics(['vehicle0'], params)] == \
        ['/clock', '/vehicle0/odometry', '/vehicle0/command/motor_speed']


@pytest.mark.parametrize('old, new, message', [
    ('type: actuators', 'type: float64_multi_array', r'motors \(float64_multi_array'),
    ('field: velocity', 'field: position', r'motors \(actuators, position\)'),
    ('output_groups: [motors]', 'output_groups: [motors, tail]\n    outputs.tail.type: '
     'actuators\n    outputs.tail.channels: [5]', r'\[motors \(actuators, velocity\), tail'),
    ('odom_topic: odom', "odom_topic: ''", 'odometry is mandatory'),
    ('odom_topic: odom', 'odom_topc: odom', 'unknown parameter'),
    ('/**:', '- /**:', 'expected a mapping')],
    ids=['float64_multi_array', 'position', 'two_groups', 'no_odometry', 'typo', 'not_mapping'])
def test_a_params_file_the_fleet_cannot_bridge_is_one_launch_error(tmp_path, old, new, message):
    params = edited(tmp_path, old, new, PRESET)
    with pytest.raises(LaunchArgumentError, match=message) as error:
        write_gazebo_fleet(WORLD, 'quad', ['vehicle0'], params, str(tmp_path))
    assert str(error.value).startswith('params_file: ') and '\n' not in str(error.value)


@pytest.mark.parametrize('params', ['', '/no/such/params.yaml'], ids=['empty', 'missing'])
def test_no_params_file_is_one_launch_error(tmp_path, params):
    with pytest.raises(LaunchArgumentError, match='params_file: ') as error:
        gazebo_bridge_topics(['vehicle0'], params)
    assert '\n' not in str(error.value)
