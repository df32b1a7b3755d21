"""
mujoco_sim: the MuJoCo vehicle as a free-running ROS 2 simulator, like Gazebo.

Publishes /clock, `imu` (sensor_msgs/Imu, FLU, every physics step) and `odom`
(nav_msgs/Odometry, ENU pose, twist in the child frame, at odom_rate), and takes rotor speeds
in rad/s on `command/motor_speed`: std_msgs/Float64MultiArray (ros2_control forward
controllers) or actuator_msgs/Actuators velocity (Gazebo's MulticopterMotorModel). Topics are
relative, so namespaces apply. Physics runs in a thread paced to the wall clock by sleeping.
"""

import sys
import threading
import time
from typing import Any, List, Optional

from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Imu
from std_msgs.msg import Float64MultiArray

from ardupilot_json_bridge.messages.inputs import time_parts
from ardupilot_json_bridge.ros.node import COMMAND_QOS, run_node
from ardupilot_json_bridge.sources.mujoco_vehicle import DEFAULT_MODEL, MujocoVehicle, VehicleError

# Rotor commands are taken with node.COMMAND_QOS, the QoS the bridge publishes them with.
# Sensors: reliable like ros_gz_bridge; best-effort subscribers receive them too.
SENSOR_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                        reliability=ReliabilityPolicy.RELIABLE)
CLOCK_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                       reliability=ReliabilityPolicy.BEST_EFFORT)
# How far physics may fall behind the wall clock before the simulator stops catching up.
MAX_LAG = 0.1


class MujocoSim(Node):
    """A free-running MuJoCo vehicle with Gazebo-like topics."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__('mujoco_sim', **kwargs)
        model = self.declare_parameter('model', '').value or DEFAULT_MODEL
        self.rate = float(self.declare_parameter('imu_rate', 1000.0).value)
        odom_rate = float(self.declare_parameter('odom_rate', 250.0).value)
        command_type = self.declare_parameter('command_type', 'float64_multi_array').value
        self.frame_id = self.declare_parameter('frame_id', 'odom').value
        self.child_frame_id = self.declare_parameter('child_frame_id', 'base_link').value
        self.vehicle = MujocoVehicle(model)
        self.odom_every = max(1, round(self.rate / odom_rate))
        self.imu_publisher = self.create_publisher(Imu, 'imu', SENSOR_QOS)
        self.odom_publisher = self.create_publisher(Odometry, 'odom', SENSOR_QOS)
        self.clock_publisher = self.create_publisher(Clock, '/clock', CLOCK_QOS)
        if command_type == 'actuators':
            from actuator_msgs.msg import Actuators
            self.create_subscription(Actuators, 'command/motor_speed',
                                     lambda m: self._command(m.velocity), COMMAND_QOS)
        elif command_type == 'float64_multi_array':
            self.create_subscription(Float64MultiArray, 'command/motor_speed',
                                     lambda m: self._command(m.data), COMMAND_QOS)
        else:
            raise ValueError(f'command_type: {command_type!r} is not float64_multi_array or '
                             'actuators')
        self._commands: Optional[List[float]] = None
        self._stop = threading.Event()
        self._imu, self._odom, self._clock = Imu(), Odometry(), Clock()
        self._imu.header.frame_id = self.child_frame_id
        self._odom.header.frame_id = self.frame_id
        self._odom.child_frame_id = self.child_frame_id
        self._thread = threading.Thread(target=self._run, daemon=True, name='mujoco-physics')
        self._thread.start()
        self.get_logger().info(f'MuJoCo {self.vehicle.path}: physics and IMU at '
                               f'{self.rate:g} Hz, odometry at {self.rate / self.odom_every:g} '
                               f'Hz, rotor speeds (rad/s) on command/motor_speed '
                               f'({command_type})')

    def _command(self, values: Any) -> None:
        self._commands = list(values)

    def _run(self) -> None:
        step = 1.0 / self.rate
        vehicle = self.vehicle
        start = time.monotonic() - vehicle.time
        count = 0
        while not self._stop.is_set():
            commands = self._commands
            if commands is not None:
                try:
                    vehicle.set_rotor_speeds(commands)
                except VehicleError as error:
                    self.get_logger().warning(str(error), throttle_duration_sec=5.0)
                self._commands = None
            vehicle.advance(step)
            count += 1
            try:
                self._publish(count % self.odom_every == 0)
            except Exception:
                # SIGTERM shuts the context down before destroy_node stops this thread.
                if not self.context.ok():
                    return
                raise
            ahead = start + vehicle.time - time.monotonic()
            if ahead > 0.0:
                time.sleep(ahead)
            elif ahead < -MAX_LAG:
                start -= ahead

    def _publish(self, with_odometry: bool) -> None:
        state = self.vehicle.state()
        imu, clock = self._imu, self._clock
        clock.clock.sec, clock.clock.nanosec = time_parts(state.time)
        self.clock_publisher.publish(clock)
        imu.header.stamp = clock.clock
        x, y, z, w = state.orientation
        orientation = imu.orientation
        orientation.x, orientation.y, orientation.z, orientation.w = x, y, z, w
        rates, force = imu.angular_velocity, imu.linear_acceleration
        rates.x, rates.y, rates.z = state.body_rates
        force.x, force.y, force.z = state.specific_force
        self.imu_publisher.publish(imu)
        if with_odometry:
            odom = self._odom
            odom.header.stamp = clock.clock
            pose = odom.pose.pose
            pose.position.x, pose.position.y, pose.position.z = state.position
            q = pose.orientation
            q.x, q.y, q.z, q.w = x, y, z, w
            twist = odom.twist.twist
            twist.linear.x, twist.linear.y, twist.linear.z = state.body_velocity
            twist.angular.x, twist.angular.y, twist.angular.z = state.body_rates
            self.odom_publisher.publish(odom)

    def destroy_node(self) -> None:
        """Stop the physics thread before the node goes."""
        stop = getattr(self, '_stop', None)
        if stop is not None:
            stop.set()
            self._thread.join(2.0)
        super().destroy_node()


def main(args: Optional[List[str]] = None) -> int:
    return run_node(MujocoSim, 'mujoco_sim', (VehicleError, ValueError), args)


if __name__ == '__main__':
    sys.exit(main())
