"""The bridge node's SITL link status as it publishes it on /diagnostics, for tests."""

import threading
from typing import Dict

LINK_STATUS = ': SITL link'


class DiagnosticsWatch:
    """The latest values of one node's SITL link status, from /diagnostics (needs rclpy)."""

    def __init__(self, prefix: str) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        self.name = prefix + LINK_STATUS
        self.values: Dict[str, str] = {}
        self.messages: Dict[str, int] = {}   # each message the status had, and how often
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node('diagnostics_watch', context=self.context)
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_array, 10)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _on_array(self, array) -> None:
        for status in array.status:
            if status.name == self.name:
                self.values = {pair.key: pair.value for pair in status.values}
                self.messages[status.message] = self.messages.get(status.message, 0) + 1

    def close(self) -> None:
        import rclpy
        self.executor.shutdown()
        self.thread.join(5.0)
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)
