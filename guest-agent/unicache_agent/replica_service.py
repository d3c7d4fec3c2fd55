"""The replica socket served by a process of its own, which alone uses the replica store.

The agent runs niced (``--nice``, default 19) so that its round never delays the guest's
own threads. A replica request is the other way round: the process that asked reads from
the page cache until its answer comes. On a guest whose vCPUs are busy a nice-19 thread
gets about 15/1024 of a CPU per busy thread beside it (CFS weights), and in the two-node
TCG guest test, three busy readers per vCPU waited more than a minute for answers the
store gives in milliseconds (docs/replicas.md). A thread of normal priority was not enough:
it shares the interpreter lock with the niced thread, which the scheduler keeps waiting
while it holds the lock, and some answers still took over 10 s. So the socket is served
by a child process, forked before the agent lowers its priority (the child keeps the
priority the agent started with), with an interpreter of its own.

Only the child uses the store. The agent hands it the store's share of its work (the
table's wanted replicas, the round's hits and memory, the writes fanotify saw) as calls
over a pipe, run in order before the requests that follow them: nothing the answers need
is ever held by a niced thread. The store's work for a request is bounded
(``replica_server``), so the child takes the CPU only for the processes that ask, and only
what their requests cost. It ends when the agent closes the pipe (or dies: end of file).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any, Optional

from .replica_server import ReplicaServer

log = logging.getLogger(__name__)

#: longest wait of the agent for the child to end at shutdown
STOP_WAIT_S = 30.0


class ReplicaService:
    """A :class:`ReplicaServer` and its store, served by a child process.

    :param server: the socket and the store it answers from.
    """

    def __init__(self, server: ReplicaServer) -> None:
        self.server = server
        self.pid = 0
        self._calls: Optional[Connection] = None

    def start(self) -> None:
        """Fork the serving process (call it before the agent lowers its own priority)."""
        calls_r, calls_w = Pipe(duplex=False)
        pid = os.fork()
        if pid == 0:  # the child: serve until the agent closes the pipe
            calls_w.close()
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent says when to stop
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                self._serve(calls_r)
            except BaseException:  # logged; the shims make the real calls
                log.exception("replica process stopped: no replica is handed out")
                code = 1
            finally:
                os._exit(code)
        calls_r.close()
        self.server.listener.close()  # the child's from now on
        self.pid = pid
        self._calls = calls_w

    def call(self, method: str, *args: Any) -> None:
        """Run ``store.method(*args)`` in the serving process, after the calls sent before
        it (the arguments are pickled). Without a serving process it runs here and now."""
        if self._calls is None:
            getattr(self.server.store, method)(*args)
            return
        try:
            self._calls.send((method, args))
        except OSError as err:  # the child is gone (logged there): nothing to hand to
            log.debug("replica process unreachable: %s", err)

    def _serve(self, calls: Connection) -> None:
        stop: list[bool] = []

        def run_calls() -> None:
            # the table before the requests that follow it: also before each request the
            # server reads in a turn, since a call sent before that request is in the pipe
            # by the time the request is read (a turn drains several requests)
            while not stop and calls.poll():
                msg = calls.recv()
                if msg is None:
                    stop.append(True)
                    return
                method, args = msg
                try:
                    getattr(self.server.store, method)(*args)
                except Exception:  # one failed call stops no answer
                    log.exception("replica store call %s failed", method)

        self.server.before_answer = run_calls
        try:
            while not stop:
                ready, _, _ = select.select([calls.fileno(), *self.server.fds()], [], [])
                run_calls()
                if not stop:
                    self.server.handle(ready)
        except EOFError:  # the agent is gone
            pass
        finally:
            self.server.close()
            self.server.store.close(unmount=True)

    def close(self, unmount: bool = False) -> None:
        """Stop serving (after the calls sent so far), close the socket and drop every
        replica (processes fall back to the real calls); optionally unmount. The serving
        process always unmounts: it is only started by the agent itself."""
        if self._calls is None:
            self.server.close()
            self.server.store.close(unmount=unmount)
            return
        with contextlib.suppress(OSError):
            self._calls.send(None)
        self._calls.close()
        self._calls = None
        _wait(self.pid, STOP_WAIT_S)


def _wait(pid: int, timeout_s: float) -> None:
    """Reap the serving process; after ``timeout_s`` kill it (it hung)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        select.select([], [], [], 0.05)
    log.warning("replica process %d did not stop in %.0f s: killed", pid, timeout_s)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)

