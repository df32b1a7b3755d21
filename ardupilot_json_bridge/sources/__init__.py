"""Worlds without rclpy: bag replay, the FDMData client and the MuJoCo engine."""
