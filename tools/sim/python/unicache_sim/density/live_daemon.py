"""The daemon of ``unicache density --live``: the real ``unicache run`` as a subprocess.

It is started as a subprocess, watched through its decision log, stopped with SIGTERM.

It runs as an operator runs it (:data:`DAEMON_FLAGS`: its cost models and step-asides on,
so on a host with one LLC group it predicts no gain and leaves the guests alone, saying
so), or with ``make demo``'s :data:`ALWAYS_PLACE_FLAGS` to show the placement itself;
a round a second, its own ``--state-dir``, and the VM registry of the live run in
``UNICACHE_STATE_DIR``. :meth:`LiveDaemon.stop` sends SIGTERM
and returns what the daemon's decision log shows it saw of each guest
(:class:`DaemonSummary`); the daemon must exit 0.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache import readback
from unicache.errors import ConfigError, UnicacheError

#: the daemon's flags (besides --state-dir)
DAEMON_FLAGS = ("--interval", "1", "--connect", "none", "--quiet")
#: added by ``--always-place`` (make demo's): each core with its L2 a unit, placed and
#: pinned without weighing the cost
ALWAYS_PLACE_FLAGS = ("--unify", "l2", "--always-place")
#: seconds the daemon may take to exit after SIGTERM
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class VmSeen:
    """What the daemon's decision log shows of one guest.

    :param vm: the guest.
    :param channel: whether the daemon opened its agent channel.
    :param reports: guest reports received.
    :param bytes_read: bytes the guest's reports counted (read through the shim).
    :param tables: placement tables published to the guest.
    """

    vm: str
    channel: bool
    reports: int
    bytes_read: int
    tables: int


@dataclass(frozen=True, slots=True)
class DaemonSummary:
    """The daemon's run.

    :param command: how it was run (``unicache run`` and its flags, the state dir aside).
    :param exit_code: its exit status after SIGTERM (0: clean, affinities restored).
    :param vms: per guest, what it saw.
    :param actions: records of other kinds (pins, weights, colors...), by kind.
    :param log: its decision log.
    """

    command: str
    exit_code: int
    vms: tuple[VmSeen, ...]
    actions: tuple[tuple[str, int], ...]
    log: Path


def unicache_binary() -> str:
    """The ``unicache`` command beside this Python (the venv's), else on PATH.

    :raises ConfigError: when there is none.
    """
    beside = Path(sys.executable).parent / "unicache"
    if beside.exists():
        return str(beside)
    found = shutil.which("unicache")
    if found is None:
        raise ConfigError("the unicache command is not installed (make setup)")
    return found


def read_log(log: Path) -> list[dict[str, Any]]:
    """The decision log's records, none before the daemon has written one (a torn last
    line is skipped, as ``unicache explain`` skips it)."""
    return readback.read_log(log) if log.exists() else []


def summarize(records: Sequence[dict[str, Any]], vms: Sequence[str]) -> tuple[
        tuple[VmSeen, ...], tuple[tuple[str, int], ...]]:
    """Per guest what the log shows, and how many records of each other kind it has."""
    seen = []
    for vm in vms:
        reports = [r for r in records if r.get("kind") == "guest-report" and r.get("vm") == vm]
        channel = any(r.get("kind") == "note" and str(r.get("message", "")).startswith(
            f"vm {vm}: listening for its agent") for r in records)
        tables = sum(1 for r in records
                     if r.get("kind") == "publish-placement" and r.get("vm") == vm)
        nbytes = sum(int(r.get("bytes", 0)) for r in reports if isinstance(r.get("bytes"), int))
        seen.append(VmSeen(vm, channel, len(reports), nbytes, tables))
    kinds: dict[str, int] = {}
    for r in records:
        kind = str(r.get("kind", "?"))
        if kind not in ("guest-report", "note", "publish-placement"):
            kinds[kind] = kinds.get(kind, 0) + 1
    return tuple(seen), tuple(sorted(kinds.items()))


class LiveDaemon:
    """``unicache run`` as a subprocess.

    :param state: its ``--state-dir`` (the decision log is ``decisions.jsonl`` there).
    :param registry: the VM registry it manages (``UNICACHE_STATE_DIR``).
    :param vms: the guests it should see.
    :param always_place: with :data:`ALWAYS_PLACE_FLAGS`.
    """

    def __init__(self, state: Path, registry: Path, vms: Sequence[str],
                 always_place: bool = False) -> None:
        self.flags = DAEMON_FLAGS + (ALWAYS_PLACE_FLAGS if always_place else ())
        self.state = state
        self.registry = registry
        self.vms = tuple(vms)
        self.log = state / "decisions.jsonl"
        self.stderr = state / "daemon.stderr"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the daemon."""
        self.state.mkdir(parents=True, exist_ok=True)
        self.log.unlink(missing_ok=True)
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [unicache_binary(), "run", *self.flags, "--state-dir", str(self.state)],
                env=dict(os.environ, UNICACHE_STATE_DIR=str(self.registry)),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            )

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise UnicacheError(f"the daemon exited {self.proc.returncode} early: "
                                f"{self._stderr_tail()}")

    def _stderr_tail(self) -> str:
        text = self.stderr.read_text(errors="replace").strip() if self.stderr.exists() else ""
        return text.splitlines()[-1] if text else "no output"

    def _wait_for(self, done: Callable[[VmSeen], bool], timeout: float) -> list[str]:
        """Poll the log until ``done`` holds for every guest; the guests it does not hold
        for at the timeout (empty: it held).

        :raises UnicacheError: when the daemon exits.
        """
        end = time.monotonic() + timeout
        while True:
            self._check_alive()
            seen, _ = summarize(read_log(self.log), self.vms)
            missing = [v.vm for v in seen if not done(v)]
            if not missing or time.monotonic() >= end:
                return missing
            time.sleep(0.25)

    def wait_channels(self, timeout: float = 60.0) -> None:
        """Wait until the daemon listens for every guest's agent.

        :raises UnicacheError: when it exits or does not in time.
        """
        if self._wait_for(lambda v: v.channel, timeout):
            raise UnicacheError(f"the daemon did not open the guests' agent channels in "
                                f"{timeout:.0f} s")

    def wait_reports(self, timeout: float = 30.0) -> None:
        """Wait until every guest has reported reads to the daemon (the shim works).

        :raises UnicacheError: when the daemon exits or a guest does not report in time.
        """
        missing = self._wait_for(lambda v: v.bytes_read > 0, timeout)
        if missing:
            raise UnicacheError(f"no reads reported to the daemon by {', '.join(missing)} in "
                                f"{timeout:.0f} s (is the shim in the image?)")

    def stop(self) -> DaemonSummary:
        """SIGTERM the daemon and wait for it (killed after :data:`STOP_TIMEOUT_S`:
        exit code -9); returns what its log shows."""
        code = -1
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait()
        seen, actions = summarize(read_log(self.log), self.vms)
        return DaemonSummary(shlex.join(["unicache", "run", *self.flags]), code, seen, actions,
                             self.log)
