"""Packaging as ROS and pip see it: package.xml, the ament index marker, installed files."""

import ast
import glob
import os
import re
import subprocess
import sys
import zipfile

from catkin_pkg.package import parse_package
import pytest

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


def test_resource_marker_and_no_script_dir_in_setup_cfg():
    assert os.path.isfile(os.path.join(ROOT, 'resource', 'ardupilot_json_bridge'))
    with open(os.path.join(ROOT, 'setup.cfg')) as cfg:
        text = cfg.read()
    # setuptools reads setup.cfg for pip's `setup.py develop` too (pip 22): see setup.py.
    assert 'script_dir' not in text and 'install_scripts' not in text


def setup_arguments(*argv: str) -> dict:
    """Return what setup.py passes to setuptools.setup when run with argv."""
    result = subprocess.run(
        [sys.executable, '-c', 'import runpy, setuptools, json, sys\n'
         'captured = {}\n'
         'setuptools.setup = lambda **kw: captured.update(kw)\n'
         f'sys.argv = {["setup.py", *argv]!r}\n'
         'runpy.run_path("setup.py")\n'
         'print(json.dumps({"data": captured["data_files"],'
         ' "options": captured.get("options", {}),'
         ' "scripts": captured["entry_points"]["console_scripts"]}))'],
        cwd=ROOT, capture_output=True, text=True, check=True)
    import json
    return json.loads(result.stdout)


# The command lines colcon-core 0.21 (python/build.py) and pip 22.0.2
# (utils/setuptools_build.py) run setup.py with.
COLCON_INSTALL = ('egg_info', '--egg-base', '../../build/ardupilot_json_bridge', 'build',
                  '--build-base', '/ws/build/ardupilot_json_bridge/build', 'install',
                  '--record', '/ws/build/ardupilot_json_bridge/install.log',
                  '--single-version-externally-managed', 'install_data')
COLCON_DEVELOP = ('develop', '--editable', '--build-directory',
                  '/ws/build/ardupilot_json_bridge/build', '--no-deps', 'symlink_data')
PIP22_DEVELOP = ('develop', '--no-deps')
PIP22_LEGACY_INSTALL = ('install', '--record', '/tmp/pip-record-x/install-record.txt',
                        '--single-version-externally-managed', '--compile',
                        '--install-headers', '/venv/include/site/python3.10/x')


@pytest.mark.parametrize('argv, for_colcon', [
    (COLCON_INSTALL, True),
    (COLCON_DEVELOP, True),
    (PIP22_DEVELOP, False),                                # pip 22: pip install -e .
    (PIP22_LEGACY_INSTALL, False),                         # pip 22 without wheel: pip install .
    (('bdist_wheel',), False),                             # pip install .
    (('editable_wheel',), False),                          # pip install -e . (PEP 660)
    (('egg_info',), False),
])
def test_ros_executables_and_lib_script_dir_only_for_colcon(argv, for_colcon):
    arguments = setup_arguments(*argv)
    scripts = ' '.join(arguments['scripts'])
    assert 'ardupilot-json-bridge = ardupilot_json_bridge.cli:main' in scripts
    assert ('bridge = ardupilot_json_bridge.ros.node:main' in scripts) == for_colcon
    assert ('mujoco_sim = ardupilot_json_bridge.ros.mujoco_sim:main' in scripts) == for_colcon
    lib = '$base/lib/ardupilot_json_bridge'  # where `ros2 run` looks
    expected = ({'develop': {'script_dir': lib}, 'install': {'install_scripts': lib}}
                if for_colcon else {})
    assert arguments['options'] == expected


# Ubuntu 22.04's, so ROS 2 Humble's: a setuptools older than 64 has no PEP 660 editable
# wheels, so pip 22 runs `setup.py develop` (a newer one would hide what Humble users meet).
PIP_22 = 'pip==22.0.2'
SETUPTOOLS_HUMBLE = 'setuptools==59.6.0'


def test_pip_22_editable_install_puts_the_command_on_path(tmp_path):
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True)
    python = str(venv / 'bin' / 'python')
    # pip 22 runs on Python 3.10 and 3.11 and needs setuptools in the venv (3.12 has none).
    got = subprocess.run([python, '-m', 'pip', 'install', '--quiet', PIP_22, SETUPTOOLS_HUMBLE],
                         capture_output=True, text=True, timeout=300)
    if got.returncode:
        pytest.skip(f'{PIP_22} with {SETUPTOOLS_HUMBLE} not installable here: '
                    f'{got.stderr.strip().splitlines()[-1:]}')
    version = subprocess.run([python, '-m', 'pip', '--version'], capture_output=True,
                             text=True, check=True).stdout
    assert version.startswith('pip 22.0.2 ')
    # --no-deps: where the script goes does not depend on them, and installing numpy is slow.
    subprocess.run([python, '-m', 'pip', 'install', '--quiet', '--no-deps', '-e', ROOT],
                   check=True, timeout=300)
    bin_dir = venv / 'bin'
    assert sorted(p.name for p in bin_dir.iterdir() if 'bridge' in p.name or 'mujoco' in p.name
                  ) == ['ardupilot-json-bridge']
    assert not (venv / 'lib' / 'ardupilot_json_bridge').exists()
    found = subprocess.run(['sh', '-c', 'command -v ardupilot-json-bridge'],
                           env={**os.environ, 'PATH': f'{bin_dir}{os.pathsep}/usr/bin:/bin'},
                           capture_output=True, text=True)
    assert found.stdout.strip() == str(bin_dir / 'ardupilot-json-bridge')
    with open(found.stdout.strip()) as script:
        assert script.readline().strip() == f'#!{python}'


def test_a_pip_wheel_puts_no_plain_bridge_on_path(tmp_path):
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--quiet', '--no-deps',
                    '--no-build-isolation', '-w', str(tmp_path), ROOT], check=True)
    (wheel,) = tmp_path.glob('*.whl')
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith('entry_points.txt')]
        scripts = archive.read(name).decode().split('[console_scripts]')[1]
    names = {line.split('=')[0].strip() for line in scripts.splitlines() if '=' in line}
    assert names == {'ardupilot-json-bridge'}
    shipped = set(archive.namelist())
    assert 'ardupilot_json_bridge/sources/models/quad_x.xml' in shipped
    assert 'ardupilot_json_bridge/sources/data/resting_vehicle/metadata.yaml' in shipped


def test_setup_installs_launch_config_and_entry_points():
    installed = setup_arguments(*COLCON_INSTALL)
    files = {os.path.join(target, os.path.basename(f))
             for target, sources in installed['data'] for f in sources}
    share = 'share/ardupilot_json_bridge'
    assert 'share/ament_index/resource_index/packages/ardupilot_json_bridge' in files
    assert f'{share}/package.xml' in files
    assert f'{share}/config/quad_x.yaml' in files
    assert any(f.startswith(f'{share}/launch/') and f.endswith('.launch.py') for f in files)
    scripts = ' '.join(installed['scripts'])
    assert 'ardupilot-json-bridge = ardupilot_json_bridge.cli:main' in scripts
    assert 'bridge = ardupilot_json_bridge.ros.node:main' in scripts


def test_core_modules_import_nothing_from_ros():
    code = ('import sys\n'
            'import ardupilot_json_bridge.cli, ardupilot_json_bridge.messages.routes\n'
            'import ardupilot_json_bridge.sources.replay, ardupilot_json_bridge.link.sitl_link\n'
            'bad = [m for m in sys.modules if m.split(".")[0] in '
            '("rclpy", "rosbags", "launch", "launch_ros", "sensor_msgs")]\n'
            'print(bad)\n')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == '[]'


# Each layer imports only from itself and the layers before it.
LAYERS = ['compiled', 'core', 'checks', 'config', 'messages', 'link', 'sources', 'ros', 'cli']


def package_imports(path: str) -> set:
    """Return the ardupilot_json_bridge modules a file imports, at any depth."""
    with open(path) as source:
        tree = ast.parse(source.read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {n for n in names if n.split('.')[0] == 'ardupilot_json_bridge'}


def layer_of(module: str) -> int:
    parts = module.split('.')
    return LAYERS.index(parts[1]) if len(parts) > 1 else 0


@pytest.mark.parametrize('path', sorted(
    p for p in glob.glob(os.path.join(ROOT, 'ardupilot_json_bridge', '**', '*.py'),
                         recursive=True) if not p.endswith('__init__.py')))
def test_each_module_imports_only_earlier_layers(path):
    relative = os.path.relpath(path, ROOT)[:-len('.py')].replace(os.sep, '.')
    own = layer_of(relative)
    later = {m for m in package_imports(path) if layer_of(m) > own}
    assert later == set(), f'{relative} ({LAYERS[own]}) imports a later layer'


def test_every_module_belongs_to_a_layer():
    top = os.path.join(ROOT, 'ardupilot_json_bridge')
    names = {os.path.splitext(n)[0] for n in os.listdir(top)} - {'__init__', '__pycache__'}
    assert names == set(LAYERS)


def test_sample_bag_ships_and_is_small():
    data = os.path.join(ROOT, 'ardupilot_json_bridge', 'sources', 'data', 'resting_vehicle')
    size = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
    assert os.path.isfile(os.path.join(data, 'metadata.yaml'))
    assert size < 100_000


def test_the_documented_parameter_table_is_current():
    from ardupilot_json_bridge.config import parameter_table
    with open(os.path.join(ROOT, 'docs', 'parameters.md')) as reference:
        assert parameter_table() in reference.read()


def test_every_page_the_readme_links_to_exists():
    with open(os.path.join(ROOT, 'README.md')) as readme:
        links = re.findall(r'\]\((docs/[^)#]+)', readme.read())
    assert 'docs/parameters.md' in links
    assert [link for link in links if not os.path.isfile(os.path.join(ROOT, link))] == []


def test_readme_commands_are_what_ci_runs():
    with open(os.path.join(ROOT, 'README.md')) as readme:
        text = readme.read()
    with open(os.path.join(ROOT, '.ci', 'run')) as ci:
        script = ci.read()
    assert "pip install -e '.[test,jazzy]' && python -m pytest -ra test/" in text
    assert "python -m pip install --quiet -e '.[test,jazzy]'" in script
    assert 'python -m pytest -ra test/' in script
    assert "pip install '.[mujoco,replay]' && ardupilot-json-bridge mujoco" in text


# What each command the README shows imports beyond the core dependencies (by hand, from
# cli.py: the engine imports mujoco; --record, replay and check read or write bags through
# rosbags; fdmdata needs nothing more). The ROS nodes need ROS, installed apart.
COMMAND_NEEDS = {'mujoco': {'mujoco'}, '--record': {'rosbags'}, 'replay': {'rosbags'},
                 'check': {'rosbags'}, 'fdmdata': set()}


def setup_extras() -> dict:
    """setup.py's extras_require, read without running setup.py: extra -> distributions."""
    with open(os.path.join(ROOT, 'setup.py')) as source:
        tree = ast.parse(source.read())
    (extras,) = [keyword.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                 for keyword in node.keywords if keyword.arg == 'extras_require']
    return {extra: {re.split(r'[<>=!~\[ ]', requirement)[0] for requirement in requirements}
            for extra, requirements in ast.literal_eval(extras).items()}


def test_the_readmes_first_install_gives_every_command_it_shows():
    # After the README's pip install '.[mujoco]', mujoco --record, replay and check stopped
    # with "needs the rosbags package".
    with open(os.path.join(ROOT, 'README.md')) as readme:
        text = readme.read()
    first = re.search(r"pip install '\.\[([a-z,]+)\]'", text).group(1).split(',')
    extras = setup_extras()
    installed = set().union(*(extras[extra] for extra in first))
    shown = [command for command in COMMAND_NEEDS
             if re.search(rf'ardupilot-json-bridge {command}\b|{command} BAG', text)]
    assert set(shown) == set(COMMAND_NEEDS), shown
    missing = {command: COMMAND_NEEDS[command] - installed for command in shown
               if COMMAND_NEEDS[command] - installed}
    assert missing == {}, f"pip install '.[{','.join(first)}]' leaves out {missing}"


# ROS_DOMAIN_ID given a number: `ROS_DOMAIN_ID=93`, `'ROS_DOMAIN_ID': '93'`, `..., '93')`.
FIXED_DOMAIN = re.compile(r"""ROS_DOMAIN_ID['"]?\]?\s*[=:,]\s*['"]?\d""")


def test_no_test_or_script_fixes_a_ros_domain():
    """A fixed ROS domain makes two runs on one machine (a developer's and CI's) cross-talk."""
    paths = [path for pattern in ('test/**/*.py', 'benchmarks/*.py', 'launch/*.py', '.ci/*')
             for path in glob.glob(os.path.join(ROOT, pattern), recursive=True)
             if not os.path.samefile(path, __file__)]
    assert any(path.endswith(os.path.join('.ci', 'run')) for path in paths)
    fixed = []
    for path in paths:
        with open(path, encoding='utf-8') as source:
            fixed += [f'{os.path.relpath(path, ROOT)}:{number}: {line.strip()}'
                      for number, line in enumerate(source, start=1)
                      if FIXED_DOMAIN.search(line)]
    assert not fixed, fixed
