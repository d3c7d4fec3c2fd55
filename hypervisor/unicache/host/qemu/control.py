"""The control socket: the host end of the guest's demo/test command runner.

The runner listens on the virtio-serial port ``org.unicache.control.0`` (QEMU's end is the
socket ``<run dir>/control.sock``). One JSON request per line, one JSON reply per line
matched by ``id``: ``{"op": "ping"}`` answers the guest's uptime; ``{"argv": [...], "env",
"timeout", "stdin", "cwd"}`` runs a command and answers its exit code and bounded output
(:class:`GuestResult`).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from unicache.errors import ProtocolError, UnicacheError, VmError

#: the largest reply line the control client accepts (runner caps stdout+stderr at 2 MiB)
MAX_REPLY_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class GuestResult:
    """What a command run in the guest produced.

    :param argv: the command.
    :param exit_code: its exit status (-1: it could not be started; negative: killed by signal).
    :param stdout: standard output (cut at the runner's bound).
    :param stderr: standard error (cut at the runner's bound).
    :param truncated: whether output was cut.
    :param timed_out: whether the guest killed it at its timeout.
    :param duration_s: run time measured in the guest.
    :param error: why it could not run, if it could not.
    """

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    truncated: bool = False
    timed_out: bool = False
    duration_s: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The command ran and exited 0."""
        return self.exit_code == 0 and not self.timed_out and self.error is None


def ping_request() -> dict[str, Any]:
    """A request for the guest's uptime."""
    return {"id": uuid.uuid4().hex, "op": "ping"}


def uptime_of(reply: Mapping[str, Any]) -> float | None:
    """The uptime (seconds) a ping's reply gives, if it gives one."""
    up = reply.get("uptime_s")
    return float(up) if isinstance(up, int | float) else None


def run_request(argv: Sequence[str], env: Mapping[str, str] | None, timeout: float,
                stdin: str | None = None, cwd: str | None = None) -> dict[str, Any]:
    """A request to run ``argv`` in the guest (the runner kills it after ``timeout`` s)."""
    req: dict[str, Any] = {"id": uuid.uuid4().hex, "argv": list(argv),
                           "env": dict(env or {}), "timeout": timeout}
    if stdin is not None:
        req["stdin"] = stdin
    if cwd is not None:
        req["cwd"] = cwd
    return req


def result_of(argv: Sequence[str], reply: Mapping[str, Any]) -> GuestResult:
    """Check a run request's reply at the boundary.

    :raises ProtocolError: kind ``bad-reply`` when it has no integer ``exit``.
    """
    code = reply.get("exit")
    if not isinstance(code, int):
        raise ProtocolError("guest command runner reply requires 'exit' member", "bad-reply")
    err_text = reply.get("error")
    return GuestResult(tuple(argv), code, str(reply.get("stdout", "")),
                       str(reply.get("stderr", "")), bool(reply.get("truncated", False)),
                       bool(reply.get("timed_out", False)),
                       float(reply.get("duration_s", 0.0)),
                       str(err_text) if err_text is not None else None)


class _Waiter:
    """One request waiting for its reply."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.event = threading.Event()
        self.reply: dict[str, Any] | None = None
        self.error: UnicacheError | None = None


class ControlMux:
    """The host end of the control port: requests of all threads share one connection.

    QEMU's socket chardev serves one client at a time, so the connection is closed again as
    soon as no request waits: other processes (``unicache vm exec``) get their turn.
    Replies are matched to requests by ``id``; replies to abandoned requests are dropped.

    :param vm: the VM (names errors and the reader thread).
    :param path: the control socket (QEMU listens).
    """

    def __init__(self, vm: str, path: str) -> None:
        self.vm = vm
        self.path = path
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._waiters: dict[str, _Waiter] = {}

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request and wait for its reply.

        :raises VmError: when the runner cannot be reached or closes the connection.
        :raises TimeoutError: without a reply in ``timeout`` seconds.
        """
        rid = str(request["id"])
        line = json.dumps(request).encode() + b"\n"
        with self._lock:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(min(5.0, max(0.1, timeout)))
                try:
                    sock.connect(self.path)
                except OSError as err:
                    sock.close()
                    raise VmError("cannot reach the guest command runner", self.vm) from err
                sock.settimeout(None)
                self._sock = sock
                threading.Thread(target=self._reader, args=(sock,), daemon=True,
                                 name=f"unicache-control-{self.vm}").start()
            waiter = self._waiters[rid] = _Waiter(self._sock)
            try:
                self._sock.sendall(line)
            except OSError as err:
                self._waiters.pop(rid, None)
                self._drop(self._sock)
                raise VmError("cannot send to the guest command runner", self.vm) from err
        waiter.event.wait(timeout)
        with self._lock:
            self._waiters.pop(rid, None)
            if not self._waiters and self._sock is not None:
                self._drop(self._sock)
        if waiter.reply is not None:
            return waiter.reply
        if waiter.error is not None:
            raise waiter.error
        raise TimeoutError(f"no reply from the guest in {timeout:.0f} s")

    def _drop(self, sock: socket.socket) -> None:
        """Close ``sock`` (lock held); its reader thread then exits."""
        if self._sock is sock:
            self._sock = None
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def _reader(self, sock: socket.socket) -> None:
        buf = b""
        why = "guest command runner closed the connection"
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            # a reply may span many reads: look for line ends only in what is new
            while b"\n" in data and b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(reply, dict):
                    continue
                with self._lock:
                    waiter = self._waiters.get(str(reply.get("id")))
                    if waiter is not None and waiter.sock is sock:
                        waiter.reply = reply
                        waiter.event.set()
            if len(buf) > MAX_REPLY_BYTES:
                why = "guest command runner reply too long"
                break
        with self._lock:
            for waiter in self._waiters.values():
                if waiter.sock is sock and not waiter.event.is_set():
                    waiter.error = VmError(why, self.vm)
                    waiter.event.set()
            self._drop(sock)
        sock.close()
