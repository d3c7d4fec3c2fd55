#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PID 1 of the unicache test guest: mounts, starts the agent and the demo runner, powers off.

No systemd in the image. This init:

1. mounts proc, sysfs, devtmpfs, devpts, /dev/shm, /run and /tmp (tmpfs);
2. starts ``unicache-agent`` (the guest agent) and, when present, the demo/test command
   runner (``/usr/local/lib/unicache-demo/runner.py``), restarting either if it exits;
3. reaps orphans;
4. powers the VM off cleanly on SIGTERM, SIGUSR2 or SIGPWR, on the ACPI power button (QMP
   ``system_powerdown``), or when the runner asks: stop children, sync, remount / read-only,
   ``reboot(RB_POWER_OFF)``.

Kernel command line switches: ``unicache.agent=0`` / ``unicache.runner=0`` leave a service
out, ``unicache.agent_args="..."`` (no spaces) passes ``,``-separated extra arguments.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import struct
import subprocess
import sys
import time

RB_POWER_OFF = 0x4321FEDC
MS_RDONLY, MS_REMOUNT, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 32, 2, 4, 8
RUNNER = "/usr/local/lib/unicache-demo/runner.py"
#: a service that exits is restarted after this many seconds (doubling up to 10 s)
RESTART_DELAY_S = 1.0
#: struct input_event on 64-bit: timeval (2 longs), type, code, value
EVENT = struct.Struct("llHHi")
EV_KEY, KEY_POWER = 1, 116

_libc = ctypes.CDLL(None, use_errno=True)
_T0 = time.monotonic()


def say(msg: str) -> None:
    """One line on the console (the serial log on the host)."""
    sys.stdout.write(f"unicache-init: [{time.monotonic() - _T0:6.2f}] {msg}\n")
    sys.stdout.flush()


def mount(src: str, target: str, fstype: str, flags: int = 0, data: str = "") -> None:
    os.makedirs(target, exist_ok=True)
    if _libc.mount(src.encode(), target.encode(), fstype.encode(), flags,
                   data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        if err != 16:  # EBUSY: already mounted
            say(f"mount {target}: {os.strerror(err)}")


def cmdline() -> dict[str, str]:
    try:
        with open("/proc/cmdline", encoding="utf-8") as f:
            words = f.read().split()
    except OSError:
        return {}
    return dict(w.split("=", 1) if "=" in w else (w, "1") for w in words)


class Service:
    """A child process the init keeps running."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name, self.argv, self.env = name, argv, env
        self.proc: subprocess.Popen[bytes] | None = None
        self.delay = RESTART_DELAY_S
        self.next_start = 0.0

    def start(self) -> None:
        try:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
            say(f"started {self.name} pid={self.proc.pid}")
        except OSError as err:
            say(f"cannot start {self.name}: {err}")
            self.proc = None
            self.next_start = time.monotonic() + self.delay

    def check(self, reaped: dict[int, int], stopping: bool) -> None:
        if self.proc is None:
            if not stopping and time.monotonic() >= self.next_start:
                self.start()
            return
        status = reaped.pop(self.proc.pid, None)
        if status is None:
            return
        code = os.waitstatus_to_exitcode(status)
        self.proc.returncode = code
        self.proc = None
        if not stopping:
            say(f"{self.name} exited with {code}; restarting in {self.delay:.0f} s")
            self.next_start = time.monotonic() + self.delay
            self.delay = min(self.delay * 2, 10.0)


def power_buttons() -> list[int]:
    """Open the evdev devices that are power buttons (ACPI button + evdev modules)."""
    fds = []
    base = "/sys/class/input"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return fds
    for entry in entries:
        if not entry.startswith("event"):
            continue
        try:
            with open(f"{base}/{entry}/device/name", encoding="utf-8") as f:
                name = f.read().strip()
        except OSError:
            continue
        if "Power Button" in name:
            try:
                fds.append(os.open(f"/dev/input/{entry}", os.O_RDONLY | os.O_NONBLOCK))
            except OSError as err:
                say(f"cannot open power button /dev/input/{entry}: {err}")
    return fds


def power_off(services: list[Service]) -> None:
    """Stop every process, sync, remount / read-only and power off."""
    say("powering off")
    for svc in services:
        if svc.proc is not None:
            with contextlib.suppress(OSError):
                os.killpg(svc.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.05)
    with contextlib.suppress(OSError):
        os.kill(-1, signal.SIGKILL)
    os.sync()
    if _libc.mount(b"/", b"/", None, MS_REMOUNT | MS_RDONLY, None) != 0:
        say(f"remount / read-only: {os.strerror(ctypes.get_errno())}")
    os.sync()
    say("power off")
    _libc.reboot(RB_POWER_OFF)
    # not reached unless reboot() failed
    while True:
        time.sleep(60)


def main() -> None:
    os.environ["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755")
    mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "gid=5,mode=620")
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    args = cmdline()
    name = args.get("unicache.name", "unicache-guest")
    try:
        with open("/proc/sys/kernel/hostname", "w", encoding="utf-8") as f:
            f.write(name)
    except OSError:
        pass
    with open("/proc/uptime", encoding="utf-8") as f:
        uptime = f.read().split()[0]
    say(f"up: kernel {os.uname().release}, {os.cpu_count()} cpus, uptime {uptime} s, "
        f"python {sys.version.split()[0]}")

    stop = {"now": False}

    def on_signal(_sig: int, _frame: object) -> None:
        stop["now"] = True

    for sig in (signal.SIGTERM, signal.SIGUSR2, signal.SIGPWR, signal.SIGINT):
        signal.signal(sig, on_signal)
    # SIGCHLD wakes select(); children are reaped in the loop
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda _s, _f: None)

    env = {"PATH": os.environ["PATH"], "HOME": "/root", "LANG": "C.UTF-8"}
    services = []
    if args.get("unicache.agent", "1") != "0":
        extra = [a for a in args.get("unicache.agent_args", "").split(",") if a]
        services.append(Service("unicache-agent",
                                ["/usr/bin/unicache-agent", *extra], env))
    if args.get("unicache.runner", "1") != "0" and os.path.exists(RUNNER):
        services.append(Service("unicache-runner (demo/test only)",
                                ["/usr/bin/python3", RUNNER], env))
    for svc in services:
        svc.start()
    buttons = power_buttons()
    say(f"ready ({len(buttons)} power button(s) watched)")

    while not stop["now"]:
        try:
            ready, _, _ = select.select([rfd, *buttons], [], [], 1.0)
        except InterruptedError:
            ready = []
        for fd in ready:
            if fd == rfd:
                os.read(rfd, 4096)
                continue
            try:
                data = os.read(fd, EVENT.size * 16)
            except OSError:
                continue
            for off in range(0, len(data) - EVENT.size + 1, EVENT.size):
                _, _, etype, code, value = EVENT.unpack_from(data, off)
                if etype == EV_KEY and code == KEY_POWER and value == 1:
                    say("power button pressed")
                    stop["now"] = True
        reaped: dict[int, int] = {}
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            reaped[pid] = status
        for svc in services:
            svc.check(reaped, stop["now"])
    power_off(services)


if __name__ == "__main__":
    try:
        main()
    except BaseException as err:  # PID 1 must never exit: the kernel would panic
        say(f"fatal: {type(err).__name__}: {err}")
        power_off([])
