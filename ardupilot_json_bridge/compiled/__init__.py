"""
A lock-step frame's hot path in C (_frame.c), each rule written once there.

The Python modules that own a rule call it from here, and the frame loop
(sources/compiled_frames.py) serves SITL with the same code where no interpreter runs.
"""

import os
import sys
from typing import List


def built_folders(path: List[str]) -> List[str]:
    """
    Return path, then every other ardupilot_json_bridge/compiled folder on sys.path.

    A source tree before the installed package on sys.path (colcon test runs pytest in the
    package's source folder, where nothing is built) finds the extension where colcon built
    and installed it.
    """
    found = list(path)
    seen = {os.path.realpath(folder) for folder in found}
    for entry in sys.path:
        folder = os.path.realpath(os.path.join(entry or os.curdir, 'ardupilot_json_bridge',
                                               'compiled'))
        if folder not in seen and os.path.isdir(folder):
            seen.add(folder)
            found.append(folder)
    return found


__path__ = built_folders(__path__)
