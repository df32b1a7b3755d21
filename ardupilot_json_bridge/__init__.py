"""ardupilot_json_bridge: ROS 2 physics engines to ArduPilot SITL's JSON interface."""

__version__ = '0.1.0'
