"""The replica socket served by a thread of its own, which alone uses the replica store.

The agent runs niced (``--nice``, default 19) so that its round never delays the guest's
own threads. A replica request is the other way round: the process that asked reads from
the page cache until its answer comes. On a guest whose vCPUs are busy a nice-19 thread
gets about 15/1024 of a CPU per busy thread beside it (CFS weights), and in the two-node
TCG guest test, three busy readers per vCPU waited more than a minute for answers the
store gives in milliseconds (docs/replicas.md). So the socket is served by this thread,
started before the agent lowers its priority: on Linux a thread's nice value is its own,
and this one keeps the priority the agent was started with.

Only this thread touches the store. The agent's loop hands it the store's share of its
work (the table's wanted replicas, the round's hits and memory, the writes fanotify saw) as
calls in a queue, run in order before the next requests: a niced thread never holds a lock
the answers need. The store's work for a request is bounded (``replica_server``), so this
thread takes the CPU only for the processes that ask, and only what their requests cost.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import select
import threading
from typing import Callable, Deque

from .replica_server import ReplicaServer
from .replica_store import ReplicaStore

log = logging.getLogger(__name__)

#: longest sleep of the thread when nothing arrives (its stop flag is checked then)
IDLE_WAIT_S = 1.0


class ReplicaService:
    """A :class:`ReplicaServer` and its store, served by a thread.

    :param server: the socket and the store it answers from.
    """

    def __init__(self, server: ReplicaServer) -> None:
        self.server = server
        self._calls: Deque[Callable[[ReplicaStore], object]] = collections.deque()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="unicache-replicas",
                                        daemon=True)

    def start(self) -> None:
        """Start serving (call it before the agent lowers its own priority)."""
        self._thread.start()

    def call(self, work: Callable[[ReplicaStore], object]) -> None:
        """Run ``work(store)`` on the serving thread, after the calls queued before it.
        Without a running thread (not started, or stopped) it runs here and now."""
        if not self._thread.is_alive():
            work(self.server.store)
            return
        self._calls.append(work)  # deque appends and pops are atomic
        with contextlib.suppress(BlockingIOError):  # a full pipe: a wake-up is pending
            os.write(self._wake_w, b"w")

    def _run_calls(self) -> None:
        while self._calls:
            work = self._calls.popleft()
            try:
                work(self.server.store)
            except Exception:  # one failed call must not stop the answers
                log.exception("replica store call failed")

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._run_calls()
                ready, _, _ = select.select([self._wake_r, *self.server.fds()], [], [],
                                            IDLE_WAIT_S)
                if self._wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                self._run_calls()  # the table before the requests that follow it
                self.server.handle(ready)
        except Exception:  # a bug: say so; the shims time out and make the real calls
            log.exception("replica thread stopped: no replica is handed out from now on")

    def close(self, unmount: bool = False) -> None:
        """Stop the thread (after the calls queued so far), close the socket and drop
        every replica (processes fall back to the real calls); optionally unmount."""
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"w")
        if self._thread.is_alive():
            self._thread.join()
        self._run_calls()
        self.server.close()
        self.server.store.close(unmount=unmount)
        os.close(self._wake_r)
        os.close(self._wake_w)
