"""
Ctrl-C and SIGTERM, taken without a lock: the one way the nodes and the command line stop.

A Python signal handler runs between bytecodes of the main thread: one that set a
threading.Event took the Event's lock, and deadlocked when the signal landed while the main
thread held that lock (waiting on the same Event). Here the C-level wakeup fd carries the
signal into a pipe, and whoever waits reads the pipe.
"""

import os
import signal
import threading
from typing import Any, Optional


class Wakeup:
    """
    A pipe the main thread sleeps on until SIGINT, SIGTERM or set() (a worker's end).

    Async-signal-safe: the signals reach it through signal.set_wakeup_fd, whose C handler
    writes a byte; the Python handlers do nothing. A handler that set a threading.Event took
    its lock, and deadlocked on a signal landing while the main thread held it.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        # A full pipe holds wakeups enough: a storm of signals is not worth a warning each.
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._previous_handlers = {number: signal.signal(number, self._ignore)
                                   for number in self.SIGNALS}
        self._watcher: Optional[threading.Thread] = None

    @staticmethod
    def _ignore(number: int, frame: Any) -> None:
        """Do nothing: the C handler has written the wakeup byte already."""

    def set(self) -> None:
        """Wake the main thread (from any thread); nothing once closed."""
        try:
            os.write(self._write, b'x')
        except OSError:
            pass    # the pipe is full of wakeups already, or closed (-1: EBADF)

    def wait(self) -> None:
        """Sleep until a signal or set()."""
        os.read(self._read, 1)

    def ignore_signals(self) -> None:
        """
        Ignore SIGINT and SIGTERM from now on: the node is stopping.

        Ctrl-C twice (a terminal's and ros2 launch's own) must not interrupt the cleanup, nor
        a late SIGTERM kill the process at exit, where Python restores the default action of
        every signal it handles, but not of those it ignores.
        """
        for number in self.SIGNALS:
            signal.signal(number, signal.SIG_IGN)
        # A signal that came just before its SIG_IGN is still pending for Python, which then
        # raises OSError('Signal N ignored due to race condition') wherever the main thread
        # runs next (in a storm: inside threading's shutdown, a traceback at exit). Take each
        # such pending signal here: the loop's backward jumps are where Python handles them.
        for _ in range(len(self.SIGNALS) + 1):
            try:
                for _ in range(2):
                    pass
                return
            except OSError:
                continue

    def watch(self, event: threading.Event) -> None:
        """
        Set event when a signal or set() comes, from a thread of its own, not from a handler.

        For code that waits on an Event in several places (the command line's runs).
        """
        self._watcher = threading.Thread(target=lambda: (self.wait(), event.set()),
                                         name='signals', daemon=True)
        self._watcher.start()

    def close(self, restore_handlers: bool = False) -> None:
        """
        Stop taking signals into the pipe (idempotent), and close it.

        restore_handlers puts back the handlers there were before (a caller that goes on
        running, such as a test calling the command line's main); otherwise they stay as set.
        """
        if self._write < 0:
            return
        if self._watcher is not None:
            self.set()   # the watcher reads its byte before the pipe goes
            self._watcher.join()
        signal.set_wakeup_fd(self._previous_fd)
        if restore_handlers:
            for number, handler in self._previous_handlers.items():
                signal.signal(number, handler)
        for fd in (self._read, self._write):
            os.close(fd)
        self._read = self._write = -1
