#!/usr/bin/env bash
# Generate actuator_msgs (the interface Gazebo users get commands in) with ROS 2's rosidl wheels
# from PyPI, which ship the generators but not this package, and install it to PREFIX.
# usage: build.sh PREFIX [DISTRO]   (DISTRO: jazzy, the default, or kilted)
# Run inside the test virtual environment; a PREFIX built from the same definition is reused.
# Then: PYTHONPATH=PREFIX/lib/python3.X/site-packages LD_LIBRARY_PATH=PREFIX/lib
#       AMENT_PREFIX_PATH=PREFIX (printed as shell assignments on stdout).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="$1"
distro="${2:-jazzy}"
case "$distro" in
    jazzy) wheel="ros-jazzy-"; extra=() ;;
    kilted) wheel="ros-"; extra=(ament-cmake-ros-core) ;;
    *) echo "build.sh: unknown distro $distro (jazzy or kilted)" >&2; exit 2 ;;
esac
venv="$(python -c 'import sys; print(sys.prefix)')"
site="$prefix/lib/python$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')/site-packages"
stamp="$distro-$(cat "$here/build.sh" "$here"/actuator_msgs/*.* "$here"/actuator_msgs/msg/* \
    | sha1sum | cut -c1-16)"
if [ "$(cat "$prefix/.stamp" 2>/dev/null)" != "$stamp" ]; then
    packages=(rosidl-default-generators rosidl-default-runtime rosidl-core-generators
              ament-cmake ament-package ament-cmake-include-directories ament-cmake-ros
              ament-cmake-gmock ament-cmake-gtest ament-cmake-pytest python-cmake-module
              "${extra[@]}")
    python -m pip install --quiet catkin_pkg 'empy==3.3.4' lark "${packages[@]/#/$wheel}" >&2
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
