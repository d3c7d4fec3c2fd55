#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Demo/test command runner of the unicache test guest (NOT part of the agent; never install
it on a production guest: it runs any command the host sends, as root).

Listens on the virtio-serial port ``org.unicache.control.0`` (found through
/sys/class/virtio-ports/*/name, no udev). One JSON object per line each way:

request ``{"id": ID, "argv": [...], "env": {...}, "timeout": S, "cwd": DIR, "stdin": TEXT}``
    runs ``argv`` (environment = a small default + ``env``), concurrently with other requests;
reply ``{"id": ID, "exit": N, "stdout": S, "stderr": S, "truncated": B, "timed_out": B,
"duration_s": F}`` (``exit`` is -1 and ``error`` is set when the command could not start;
stdout/stderr are cut at ``max_output`` bytes, default and at most MAX_OUTPUT);
``{"id": ID, "op": "ping"}`` -> ``{"id": ID, "pong": true, "uptime_s": F}``;
``{"id": ID, "op": "poweroff"}`` -> ``{"id": ID, "ok": true}``, then the init powers off.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

PORT_NAME = "org.unicache.control.0"
SYS_DIR = "/sys/class/virtio-ports"
#: request lines longer than this are dropped
MAX_LINE = 1 << 20
#: default and maximum bytes of stdout (and of stderr) returned
MAX_OUTPUT = 1 << 20
#: commands without a timeout are killed after this many seconds
DEFAULT_TIMEOUT_S = 600.0
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "LANG": "C.UTF-8"}


def log(msg: str) -> None:
    sys.stderr.write(f"unicache-runner: {msg}\n")
    sys.stderr.flush()


def find_port(timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            for entry in sorted(os.listdir(SYS_DIR)):
                try:
                    with open(f"{SYS_DIR}/{entry}/name", encoding="utf-8") as f:
                        if f.read().strip() == PORT_NAME:
                            return f"/dev/{entry}"
                except OSError:
                    continue
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"unicache-runner: no virtio-serial port named {PORT_NAME}")
        time.sleep(0.5)


class Runner:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.wlock = threading.Lock()

    def send(self, msg: dict[str, object]) -> None:
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        with self.wlock:
            view = memoryview(data)
            while view:
                try:
                    n = os.write(self.fd, view)
                except InterruptedError:
                    continue
                view = view[n:]

    def handle(self, line: bytes) -> None:
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError as err:
            log(f"bad request line: {err}")
            return
        rid = req.get("id")
        op = req.get("op", "run")
        if op == "ping":
            with open("/proc/uptime", encoding="utf-8") as f:
                up = float(f.read().split()[0])
            self.send({"id": rid, "pong": True, "uptime_s": up})
        elif op == "poweroff":
            self.send({"id": rid, "ok": True})
            time.sleep(0.2)
            # systemd powers off on SIGRTMIN+4, the image's own init on SIGUSR2
            systemd = os.path.isdir("/run/systemd/system")
            os.kill(1, signal.SIGRTMIN + 4 if systemd else signal.SIGUSR2)
        elif op == "run":
            threading.Thread(target=self.run, args=(rid, req), daemon=True).start()
        else:
            self.send({"id": rid, "exit": -1, "error": f"unknown op {op!r}"})

    def run(self, rid: object, req: dict[str, object]) -> None:
        t0 = time.monotonic()
        argv = req.get("argv")
        env = dict(BASE_ENV)
        extra = req.get("env") or {}
        timeout = req.get("timeout") or DEFAULT_TIMEOUT_S
        cap = req.get("max_output") or MAX_OUTPUT
        stdin = req.get("stdin")
        if (not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv)
                or not isinstance(extra, dict) or not isinstance(timeout, int | float)
                or not isinstance(cap, int) or not (stdin is None or isinstance(stdin, str))):
            self.send({"id": rid, "exit": -1, "error": "argv must be a non-empty list of strings, "
                       "env an object, timeout a number"})
            return
        env.update({str(k): str(v) for k, v in extra.items()})
        cap = max(0, min(cap, MAX_OUTPUT))
        reply: dict[str, object] = {"id": rid}
        try:
            stdin_mode = subprocess.PIPE if stdin is not None else subprocess.DEVNULL
            cwd = str(req.get("cwd") or "/")
            proc = subprocess.Popen(argv, env=env, cwd=cwd,
                                    stdin=stdin_mode,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as err:
            self.send({"id": rid, "exit": -1, "error": f"cannot run {argv[0]}: {err}",
                       "stdout": "", "stderr": "", "duration_s": 0.0})
            return
        timed_out = False
        try:
            out, err_b = proc.communicate(stdin.encode() if stdin is not None else None,
                                          timeout=float(timeout))
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err_b = proc.communicate()
        reply.update({
            "exit": proc.returncode,
            "stdout": out[:cap].decode("utf-8", "replace"),
            "stderr": err_b[:cap].decode("utf-8", "replace"),
            "truncated": len(out) > cap or len(err_b) > cap,
            "timed_out": timed_out,
            "duration_s": round(time.monotonic() - t0, 6),
        })
        self.send(reply)

    def serve(self) -> None:
        buf = b""
        while True:
            try:
                ready, _, _ = select.select([self.fd], [], [], 1.0)
            except InterruptedError:
                continue
            if not ready:
                continue
            try:
                data = os.read(self.fd, 65536)
            except (BlockingIOError, InterruptedError):
                continue
            if not data:
                # the host side is not connected: keep the port open (bytes sent while it is
                # closed would be lost) and look again shortly
                time.sleep(0.2)
                continue
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    self.handle(line)
            if len(buf) > MAX_LINE:
                log("request line too long, dropped")
                buf = b""


def main() -> None:
    path = find_port()
    fd = os.open(path, os.O_RDWR)
    log(f"serving on {path} ({PORT_NAME})")
    Runner(fd).serve()


if __name__ == "__main__":
    main()
