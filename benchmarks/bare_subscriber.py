"""
The baseline of benchmarks/node_cpu.py: a bare rclpy node doing the least a bridge must.

It receives the simulator's `imu` and `odom` as the bridge does (sensor-data QoS, messages
deserialized by rclpy), publishes one std_msgs/Float64MultiArray of four values per IMU
message (about the commands the bridge publishes) and nothing else. Like every node of a
simulation (and the bridge), it runs on simulated time: rclpy then subscribes /clock. It listens to
/diagnostics (1 Hz) to report the bridge's link figures, and prints its counts as JSON on exit.
"""

import json
import sys

from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Imu
from std_msgs.msg import Float64MultiArray

COMMAND_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)


class BareSubscriber(Node):
    """Counts IMU and odometry messages and answers each IMU message with a command."""

    def __init__(self) -> None:
        super().__init__('bare_subscriber')
        self.counts = {'imu': 0, 'odom': 0, 'commands': 0}
        self.link = {}
        self.command = self.create_publisher(Float64MultiArray, 'bare/command', COMMAND_QOS)
        self.create_subscription(Imu, 'imu', self.on_imu, qos_profile_sensor_data)
        self.create_subscription(Odometry, 'odom', self.on_odom, qos_profile_sensor_data)
        self.create_subscription(DiagnosticArray, '/diagnostics', self.on_diagnostics, 10)

    def on_imu(self, message: Imu) -> None:
        self.counts['imu'] += 1
        self.command.publish(Float64MultiArray(data=[420.0, 420.0, 420.0, 420.0]))
        self.counts['commands'] += 1

    def on_odom(self, message: Odometry) -> None:
        self.counts['odom'] += 1

    def on_diagnostics(self, message: DiagnosticArray) -> None:
        for status in message.status:
            if status.name.endswith('SITL link'):
                self.link = {value.key: value.value for value in status.values}


def main() -> int:
    rclpy.init()
    node = BareSubscriber()
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok():
            raise  # a SIGTERM under the executor's wait raises (RCLError on Jazzy)
    print(json.dumps({'counts': node.counts, 'link': node.link}), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
