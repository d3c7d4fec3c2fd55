"""VMs given as hypervisor process ids: vCPU threads found by their names in procfs.

QEMU started with ``-name guest=NAME,debug-threads=on`` names each vCPU thread
``CPU <n>/<accel>`` (``CPU 0/KVM``, ``CPU 1/TCG``). This backend manages such processes
when unicache did not start them and no libvirt knows them: ``unicache run --attach
NAME=PID[:AGENT_SOCKET]``.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

from unicache.errors import ConfigError
from unicache.host.ports import RunningVm, VmEvent, VmSource

log = logging.getLogger(__name__)

#: QEMU's vCPU thread names with debug-threads=on
VCPU_THREAD = re.compile(r"^CPU (\d+)/(KVM|TCG|HVF|WHPX|NVMM|Xen)$")


def vcpu_threads_of(pid: int, proc: Path = Path("/proc")) -> dict[int, int]:
    """vCPU index -> thread id, from ``/proc/PID/task/*/comm``.

    :returns: an empty mapping when the process is gone or names no vCPU threads.
    """
    threads: dict[int, int] = {}
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return threads
    for task in tasks:
        try:
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        match = VCPU_THREAD.match(comm)
        if match:
            threads[int(match.group(1))] = int(task.name)
    return threads


def parse_attach(spec: str) -> tuple[str, int, Path | None]:
    """Parse ``NAME=PID[:AGENT_SOCKET]``.

    :raises ConfigError: naming what is wrong.
    """
    name, sep, rest = spec.partition("=")
    pid_text, _, sock = rest.partition(":")
    if not sep or not name or not pid_text.isdigit() or len(name) > 64 or "/" in name:
        raise ConfigError(f"bad --attach {spec!r} (expected NAME=PID or NAME=PID:SOCKET)")
    return name, int(pid_text), Path(sock) if sock else None


class ProcessVmSource:
    """Lists the attached processes that still run, with their vCPU threads.

    :param attached: ``(name, pid, agent socket)`` triples.
    """

    def __init__(self, attached: list[tuple[str, int, Path | None]]) -> None:
        self.attached = attached

    def drain_events(self) -> list[VmEvent]:
        """No lifecycle events: each round lists what runs."""
        return []

    def close(self) -> None:
        """Nothing to let go of."""

    def running(self) -> list[RunningVm]:
        """The attached VMs whose process still has vCPU threads."""
        out = []
        for name, pid, sock in self.attached:
            threads = vcpu_threads_of(pid)
            if threads:
                out.append(RunningVm(name, pid, threads, sock))
        return out


if TYPE_CHECKING:
    _check: VmSource = ProcessVmSource([])  # conformance, as mypy sees it
