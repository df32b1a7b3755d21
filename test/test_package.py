"""Packaging as ROS and pip see it: package.xml, the ament index marker, installed files."""

import os
import subprocess
import sys

from catkin_pkg.package import parse_package

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')


def test_package_xml_is_format_3_ament_python_with_dependencies():
    package = parse_package(os.path.join(ROOT, 'package.xml'))
    package.validate()
    assert package.package_format == 3
    assert package.name == 'ardupilot_json_bridge'
    assert package.get_build_type() == 'ament_python'
    exec_depends = {d.name for d in package.exec_depends}
    assert {'rclpy', 'launch_ros', 'nav_msgs', 'sensor_msgs', 'std_msgs', 'geometry_msgs',
            'diagnostic_msgs', 'actuator_msgs', 'python3-numpy'} <= exec_depends
    assert {d.name for d in package.test_depends} >= {'python3-pytest'}
    assert all('@' in m.email for m in package.maintainers)


def test_resource_marker_and_setup_cfg_script_dir():
    assert os.path.isfile(os.path.join(ROOT, 'resource', 'ardupilot_json_bridge'))
    with open(os.path.join(ROOT, 'setup.cfg')) as cfg:
        text = cfg.read()
    assert 'script_dir=$base/lib/ardupilot_json_bridge' in text
    assert 'install_scripts=$base/lib/ardupilot_json_bridge' in text


def test_setup_installs_launch_config_and_entry_points():
    result = subprocess.run(
        [sys.executable, '-c', 'import runpy, setuptools, json\n'
         'captured = {}\n'
         'setuptools.setup = lambda **kw: captured.update(kw)\n'
         'runpy.run_path("setup.py")\n'
         'print(json.dumps({"data": captured["data_files"],'
         ' "scripts": captured["entry_points"]["console_scripts"]}))'],
        cwd=ROOT, capture_output=True, text=True, check=True)
    import json
    installed = json.loads(result.stdout)
    files = {os.path.join(target, os.path.basename(f))
             for target, sources in installed['data'] for f in sources}
    share = 'share/ardupilot_json_bridge'
    assert 'share/ament_index/resource_index/packages/ardupilot_json_bridge' in files
    assert f'{share}/package.xml' in files
    assert f'{share}/config/quad_x.yaml' in files
    assert any(f.startswith(f'{share}/launch/') and f.endswith('.launch.py') for f in files)
    scripts = ' '.join(installed['scripts'])
    assert 'ardupilot-json-bridge = ardupilot_json_bridge.cli:main' in scripts
    assert 'bridge = ardupilot_json_bridge.node:main' in scripts


def test_core_modules_import_nothing_from_ros():
    code = ('import sys\n'
            'import ardupilot_json_bridge.cli, ardupilot_json_bridge.routes\n'
            'import ardupilot_json_bridge.replay, ardupilot_json_bridge.link\n'
            'bad = [m for m in sys.modules if m.split(".")[0] in '
            '("rclpy", "rosbags", "launch", "launch_ros", "sensor_msgs")]\n'
            'print(bad)\n')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == '[]'


def test_sample_bag_ships_and_is_small():
    data = os.path.join(ROOT, 'ardupilot_json_bridge', 'data', 'resting_vehicle')
    size = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
    assert os.path.isfile(os.path.join(data, 'metadata.yaml'))
    assert size < 100_000


def test_readme_parameter_table_is_current():
    from ardupilot_json_bridge.config import parameter_table
    with open(os.path.join(ROOT, 'README.md')) as readme:
        assert parameter_table() in readme.read()


def test_readme_commands_are_what_ci_runs():
    with open(os.path.join(ROOT, 'README.md')) as readme:
        text = readme.read()
    with open(os.path.join(ROOT, '.ci', 'run')) as ci:
        script = ci.read()
    assert "pip install -e '.[test,jazzy]' && python -m pytest -ra test/" in text
    assert "python -m pip install --quiet -e '.[test,jazzy]'" in script
    assert 'python -m pytest -ra test/' in script
    assert "pip install '.[mujoco]' && ardupilot-json-bridge mujoco" in text
