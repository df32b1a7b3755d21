"""The rclpy layer: the node, the MuJoCo simulator node, diagnostics and launch helpers."""
