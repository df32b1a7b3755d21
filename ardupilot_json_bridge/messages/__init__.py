"""ROS messages to samples and PWM to messages, by field name: no rclpy, testable with rosbags."""
