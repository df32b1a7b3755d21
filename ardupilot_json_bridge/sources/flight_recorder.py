"""
A flight recorder: the MuJoCo vehicle's sensors and SITL's commands as a rosbag2.

Foxglove and PlotJuggler open the bag (MCAP by default), `ardupilot-json-bridge check`
judges it and `replay` serves it to SITL again. The topics are those the mujoco_sim node
publishes, in ROS conventions: /clock, imu and servo_pwm every frame, odometry every
ODOMETRY_EVERY frames. Frames are gathered in batches that a thread of its own serializes
(struct CDR) and writes: the lock-step pays for an append, the writer wakes once a batch, and
nothing runs while no frame comes.
"""

import logging
import os
import queue
import threading
from typing import Iterator, List, Optional, Sequence, Tuple

from ardupilot_json_bridge.messages.cdr_writer import (
    CLOCK_TYPE, encode_clock, encode_float64_array, encode_imu, encode_odometry,
    FLOAT64_ARRAY_TYPE)
from ardupilot_json_bridge.messages.routes import IMU_TYPE, ODOMETRY_TYPE
from ardupilot_json_bridge.messages.servo_pwm import encode_servo_pwm, SERVO_PWM_TYPE
from ardupilot_json_bridge.sources.bagfile import BagError, CLOCK_TOPIC, typestore, write_bag
from ardupilot_json_bridge.sources.mujoco_vehicle import VehicleState

# 300 Hz at SITL's 1200 frames/s, near Gazebo's 250 Hz odometry; 0.59 x the bytes of every frame.
ODOMETRY_EVERY = 4
# A tenth of a second at SITL's 1200 frames/s: one hand-over to the writer for so many frames.
BATCH_FRAMES = 120
IMU_TOPIC = '/imu'
ODOMETRY_TOPIC = '/odom'
PWM_TOPIC = '/servo_pwm'
Frame = Tuple[VehicleState, Sequence[int], Sequence[float], int]


class FlightRecorder:
    """Writes every recorded frame to a new bag; close() finishes it."""

    def __init__(self, path: str, command_topic: str = '/command/motor_speed',
                 storage: str = 'mcap', logger: Optional[logging.Logger] = None,
                 namespaces: Sequence[str] = ('',)) -> None:
        """Record to a new bag at path; a fleet's vehicle k under namespaces[k] (/clock once)."""
        if os.path.exists(path):
            raise BagError(f'--record: {path} exists; name a new directory for the bag')
        self.path = path
        self.command_topic = command_topic
        # The mujoco_sim node's frames: odometry from odom to base_link, the IMU in base_link.
        self.frame_id, self.child_frame_id = 'odom', 'base_link'
        self.logger = logger or logging.getLogger('ardupilot_json_bridge.record')
        self.frames = 0
        self.first_time: Optional[float] = None
        self.last_time: Optional[float] = None
        self.failed: Optional[str] = None
        self._prefixes = tuple(f'/{ns.strip("/")}' if ns.strip('/') else '' for ns in namespaces)
        self._counts = [0] * len(self._prefixes)
        # /clock once a world step, from whichever vehicle records it first (a fleet's world
        # steps once for all, each vehicle's frame recorded before the next step): the clock
        # runs on while any vehicle flies, vehicle 0's SITL away or not.
        self._clock_time: Optional[float] = None
        # A fleet's link threads add frames side by side.
        self._lock = threading.Lock()
        self._store = typestore('jazzy')
        self._batch: List[Frame] = []
        self._queue: 'queue.SimpleQueue[Optional[List[Frame]]]' = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write, args=(storage,), daemon=True,
                                        name='flight_recorder')
        self._thread.start()

    def add(self, state: VehicleState, pwm: Sequence[int], commands: Sequence[float],
            vehicle: int = 0) -> None:
        """Queue one frame: the vehicle after the step, and the PWM and commands that moved it."""
        if self.failed is not None:
            return
        with self._lock:
            if self.first_time is None:
                self.first_time = state.time
            self.last_time = state.time
            self._batch.append((state, tuple(pwm), tuple(commands), vehicle))
            if len(self._batch) >= BATCH_FRAMES * len(self._prefixes):
                self._queue.put(self._batch)
                self._batch = []

    def close(self) -> None:
        """Write what is gathered, close the bag and say where it is."""
        with self._lock:
            self._queue.put(self._batch)
            self._batch = []
        self._queue.put(None)
        self._thread.join()
        if self.failed is None and self.frames:
            span = self.last_time - self.first_time
            self.logger.info(f'recorded {self.frames} frames ({span:.1f} s of flight) to '
                             f'{self.path}: open it in Foxglove or PlotJuggler')

    def _write(self, storage: str) -> None:
        try:
            write_bag(self.path, self._messages(), self._store, storage)
        except Exception as error:
            self.failed = str(error)
            self.logger.error(f'recording to {self.path} stopped: {error}')
            while self._queue.get() is not None:
                pass

    def _messages(self) -> Iterator[Tuple[str, str, int, bytes]]:
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            for frame in batch:
                yield from self._frame_messages(*frame)

    def _frame_messages(self, state: VehicleState, pwm: Sequence[int], commands: Sequence[float],
                        vehicle: int) -> Iterator[Tuple[str, str, int, bytes]]:
        t = state.time
        log_time = round(t * 1e9)
        prefix = self._prefixes[vehicle]
        if t != self._clock_time:
            self._clock_time = t
            yield CLOCK_TOPIC, CLOCK_TYPE, log_time, encode_clock(t)
        yield prefix + IMU_TOPIC, IMU_TYPE, log_time, encode_imu(
            t, self.child_frame_id, state.orientation, state.body_rates, state.specific_force)
        if self._counts[vehicle] % ODOMETRY_EVERY == 0:
            yield prefix + ODOMETRY_TOPIC, ODOMETRY_TYPE, log_time, encode_odometry(
                t, self.frame_id, self.child_frame_id, state.position, state.orientation,
                state.body_velocity, state.body_rates)
        yield prefix + PWM_TOPIC, SERVO_PWM_TYPE, log_time, encode_servo_pwm(t, pwm)
        yield (prefix + self.command_topic, FLOAT64_ARRAY_TYPE, log_time,
               encode_float64_array(commands))
        self._counts[vehicle] += 1
        self.frames += 1
