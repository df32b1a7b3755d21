"""
rosbag2 reading and writing through rosbags: the only module that imports it, lazily.

rosbags reads both storage formats (sqlite3, Humble's default; MCAP, Jazzy's) without ROS,
and carries the message classes of each distribution.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, Tuple

from ardupilot_json_bridge.config import one_line

# The simulated clock a bag may hold beside its topics (rosgraph_msgs/Clock).
CLOCK_TOPIC = '/clock'
ROSBAGS_MISSING = ('reading or writing bags needs the rosbags package: pip install rosbags '
                   '(or pip install ardupilot_json_bridge[replay])')


class BagError(RuntimeError):
    """A bag that cannot be replayed as configured; the message says what to change."""


def _rosbags():
    try:
        import rosbags.highlevel
        import rosbags.rosbag2
        import rosbags.typesys
    except ImportError:
        raise BagError(ROSBAGS_MISSING) from None
    return rosbags


def _reader(rosbags: Any, path: str) -> Any:
    """
    Return rosbags' reader of a bag; its own type definitions, else Humble's.

    rosbag2 before Iron (Humble's) stores no message definitions: their types are read as
    Humble defines them.
    """
    return rosbags.highlevel.AnyReader([Path(path)], default_typestore=typestore('humble'))


@dataclass(frozen=True)
class BagMessage:
    """One message of a bag: its topic, log time (ns) and deserialized message."""

    topic: str
    log_time_ns: int
    message: Any


def bag_topics(path: str) -> Dict[str, str]:
    """Topic name -> message type of every topic in the bag."""
    rosbags = _rosbags()
    try:
        with _reader(rosbags, path) as reader:
            return {c.topic: c.msgtype for c in reader.connections}
    except Exception as error:
        raise BagError(f'cannot open bag {path}: {one_line(error)}') from None


@dataclass(frozen=True)
class BagSpan:
    """First and last log times of a bag (ns) and its message count."""

    start_ns: int
    end_ns: int
    count: int


def bag_span(path: str) -> BagSpan:
    """Return the bag's time span and size, from its metadata (nothing is read)."""
    rosbags = _rosbags()
    try:
        with _reader(rosbags, path) as reader:
            return BagSpan(reader.start_time, reader.end_time, reader.message_count)
    except Exception as error:
        raise BagError(f'cannot open bag {path}: {one_line(error)}') from None


def read_messages(path: str, topics: Iterable[str]) -> Iterator[BagMessage]:
    """Return the messages of the given topics in log-time order, read lazily."""
    rosbags = _rosbags()
    wanted = set(topics)
    try:
        with _reader(rosbags, path) as reader:
            connections = [c for c in reader.connections if c.topic in wanted]
            for connection, log_time, raw in reader.messages(connections=connections):
                yield BagMessage(connection.topic, log_time,
                                 reader.deserialize(raw, connection.msgtype))
    except BagError:
        raise
    except Exception as error:
        raise BagError(f'cannot read bag {path}: {one_line(error)}') from None


def typestore(distribution: str = 'humble') -> Any:
    """Return rosbags' message classes of a ROS 2 distribution ('humble' or 'jazzy')."""
    rosbags = _rosbags()
    stores = rosbags.typesys.Stores
    return rosbags.typesys.get_typestore(getattr(stores, f'ROS2_{distribution.upper()}'))


def write_bag(path: str, messages: Iterable[Tuple[str, str, int, Any]], store: Any,
              storage: str = 'sqlite3', compress: bool = False) -> None:
    """
    Write (topic, msgtype, log_time_ns, message) tuples as a rosbag2 Humble can read.

    A message is a rosbags object, or bytes already serialized (CDR). compress: zstd file
    compression, which ros2 bag play reads with its default plugins.
    """
    rosbags = _rosbags()
    bag = rosbags.rosbag2
    plugin = {'sqlite3': bag.StoragePlugin.SQLITE3, 'mcap': bag.StoragePlugin.MCAP}[storage]
    connections: Dict[str, Any] = {}
    writer = bag.Writer(Path(path), version=8, storage_plugin=plugin)
    if compress:
        writer.set_compression(bag.CompressionMode.FILE, bag.CompressionFormat.ZSTD)
    with writer:
        for topic, msgtype, log_time_ns, message in messages:
            if topic not in connections:
                connections[topic] = writer.add_connection(topic, msgtype, typestore=store)
            data = message if isinstance(message, bytes) else store.serialize_cdr(message,
                                                                                  msgtype)
            writer.write(connections[topic], log_time_ns, data)
