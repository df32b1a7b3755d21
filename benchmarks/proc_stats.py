"""CPU time and memory of a process (and its descendants) from /proc, for the benchmarks."""

import glob
import os
from typing import List, Optional

TICKS = os.sysconf('SC_CLK_TCK')


def cpu_seconds(pid: int) -> Optional[float]:
    """User plus system CPU seconds pid has used so far, or None once it is gone."""
    try:
        with open(f'/proc/{pid}/stat') as stream:
            fields = stream.read().rsplit(')', 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def children(pid: int) -> List[int]:
    """Return the direct children of pid, from /proc."""
    found = []
    for task in glob.glob(f'/proc/{pid}/task/*/children'):
        try:
            with open(task) as stream:
                found += [int(child) for child in stream.read().split()]
        except OSError:
            pass   # the thread ended while we looked
    return found


def tree_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of pid and its descendants (those still running)."""
    own = cpu_seconds(pid) or 0.0
    return own + sum(tree_cpu_seconds(child) for child in children(pid))


def rss_bytes(pid: int) -> int:
    """Resident memory of pid (VmRSS), 0 once it is gone."""
    try:
        with open(f'/proc/{pid}/status') as stream:
            for line in stream:
                if line.startswith('VmRSS:'):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of pid and its descendants (those still running), summed."""
    return rss_bytes(pid) + sum(tree_rss_bytes(child) for child in children(pid))
