"""QEMU process control: spawn it, wait for QMP, tell if it lives, kill it, read why it failed.

A QEMU is named by its pid *and* its start time (``/proc/PID/stat`` field 22), so a reused
pid is never mistaken for it; a zombie counts as gone. The guest's console log and QEMU's
own output give the one line that says why a start or a boot failed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from unicache.errors import ConfigError, VmError

#: seconds QEMU may take to create its QMP socket after exec
QEMU_START_TIMEOUT_S = 15.0
#: console lines that say why a boot failed, most telling first
_BOOT_FAILURE_MARKERS = ("UNICACHE-INITRAMFS-FAILED", "Kernel panic", "unicache-init: fatal")


def proc_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat, or ``None`` when the process is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # the command name (field 2) may contain spaces; fields after the last ')' are plain
    rest = stat[stat.rfind(")") + 2:].split()
    if not rest or rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def alive(pid: int, start_ticks: int) -> bool:
    """Whether the process ``pid`` started at ``start_ticks`` still runs (not a zombie)."""
    return proc_start_ticks(pid) == start_ticks


def spawn(name: str, argv: list[str], run_dir: Path, qemu_log: Path,
          stale: tuple[Path, ...] = ()) -> subprocess.Popen[bytes]:
    """Start QEMU in a fresh run directory (mode 0700), in its own session.

    The command line is saved as ``<run dir>/cmdline``; QEMU's stdout and stderr go to
    ``qemu_log``.

    :param name: the VM (for the error message).
    :param argv: QEMU's command line.
    :param run_dir: the VM's run directory (emptied first).
    :param qemu_log: where QEMU's own output goes.
    :param stale: files removed first (the registry record of a QEMU that is gone).
    :returns: the process.
    :raises ConfigError: when the run directory cannot be made or QEMU cannot be executed.
    """
    try:
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True, mode=0o700)
        for path in stale:
            path.unlink(missing_ok=True)
        (run_dir / "cmdline").write_text(" ".join(argv) + "\n", encoding="utf-8")
        with open(qemu_log, "wb") as out:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=out, start_new_session=True, close_fds=True)
    except OSError as err:
        raise ConfigError(f"cannot start VM {name} in {run_dir} (set "
                          "UNICACHE_STATE_DIR to a writable directory)") from err


def qemu_error(qemu_log: Path) -> str:
    """The last line QEMU printed (cut at 300 characters), or ``no output``."""
    try:
        lines = [ln for ln in qemu_log.read_text(errors="replace").splitlines()
                 if ln.strip() and "Unable to connect character device uc0" not in ln]
    except OSError:
        return "no output"
    return lines[-1][:300] if lines else "no output"


def wait_qmp(name: str, proc: subprocess.Popen[bytes], qmp_socket: Path,
             qemu_log: Path) -> None:
    """Wait until QEMU greets a client on its QMP socket.

    :param name: the VM (for the error message).
    :param proc: the QEMU process.
    :param qmp_socket: its QMP socket.
    :param qemu_log: its output (for the error message).
    :raises VmError: when QEMU exits first or takes longer than
        :data:`QEMU_START_TIMEOUT_S`.
    """
    deadline = time.monotonic() + QEMU_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise VmError(f"QEMU exited with {proc.returncode}: {qemu_error(qemu_log)}", name)
        if qmp_socket.exists():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(1.0)
                try:
                    s.connect(str(qmp_socket))
                    # QEMU greets every new QMP client; reading it proves it serves
                    if s.recv(1):
                        return
                except OSError:
                    pass
        time.sleep(0.05)
    raise VmError(f"QEMU did not open its QMP socket in {QEMU_START_TIMEOUT_S:.0f} s", name)


def wait_gone(proc: subprocess.Popen[bytes] | None, pid: int, start_ticks: int,
              timeout: float) -> bool:
    """Wait until QEMU has exited.

    :param proc: the process, when this process started it (then it is reaped).
    :param pid: its pid.
    :param start_ticks: its start time.
    :param timeout: seconds to wait.
    :returns: whether it is gone.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return True
        if not alive(pid, start_ticks):
            return True
        time.sleep(0.05)
    return False


def kill(pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    """Send ``sig`` to ``pid``; a process already gone (or not ours) is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def console_lines(console_log: Path) -> list[str]:
    """The guest console's non-blank lines.

    :raises OSError: when the log cannot be read.
    """
    return [ln for ln in console_log.read_text(errors="replace").splitlines() if ln.strip()]


def boot_failure(console_log: Path) -> str:
    """The console line that best says why a boot failed (initramfs error, kernel panic),
    else the last two lines (cut at 300 characters)."""
    try:
        got = [ln.strip() for ln in console_lines(console_log)]
    except OSError:
        return "no console output"
    for marker in _BOOT_FAILURE_MARKERS:
        hits = [ln for ln in got if marker in ln]
        if hits:
            return hits[-1][:300]
    return " | ".join(got[-2:])[:300] or "no console output"


def console_tail(console_log: Path, lines: int = 1) -> str:
    """The last lines of the guest console, joined by `` | `` ('' when there is none)."""
    try:
        got = console_lines(console_log)
    except OSError:
        return ""
    return " | ".join(got[-lines:])
