"""
A lock-step frame's hot path in C (_frame.c), each rule written once there.

The Python modules that own a rule call it from here, and the frame loop
(sources/compiled_frames.py) serves SITL with the same code where no interpreter runs.
"""
