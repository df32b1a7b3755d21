"""CPU time of a process from /proc, for the benchmarks' CPU figures."""

import os
from typing import Optional

TICKS = os.sysconf('SC_CLK_TCK')


def cpu_seconds(pid: int) -> Optional[float]:
    """User plus system CPU seconds pid has used so far, or None once it is gone."""
    try:
        with open(f'/proc/{pid}/stat') as stream:
            fields = stream.read().rsplit(')', 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS
