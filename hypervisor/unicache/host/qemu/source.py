"""The VMs of unicache's own QEMU backend, as the daemon sees them (a VmSource).

Reads the VM registry ``unicache vm start`` writes, and asks each new QEMU once, through
QMP ``query-cpus-fast``, which host thread runs which vCPU (thread ids do not change while
a QEMU runs, so they are cached per QEMU process). Each VM's guest NUMA nodes come from its
record, with the host colors of colored nodes
(:meth:`unicache.host.qemu.GuestNodeSpec.guest_colors`: a ``memory-backend-colored`` node
has its colors, a hugepage-fallback node all colors, any other node none), so the policies
see which nodes are colored.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from unicache.errors import UnicacheError
from unicache.host.ports import RunningVm, VmEvent, VmSource
from unicache.host.qemu.registry import list_vms
from unicache.host.qemu.vm import QemuVm
from unicache.model import GuestNode

log = logging.getLogger(__name__)


class QemuRegistrySource:
    """Running VMs from the registry under ``registry`` (default: env or ``STATE_DIR/vms``).

    :param state_dir: the daemon's state directory.
    """

    def __init__(self, state_dir: Path) -> None:
        env = os.environ.get("UNICACHE_STATE_DIR")
        self.registry = Path(env) if env else state_dir / "vms"
        self._threads: dict[tuple[str, int, int], dict[int, int]] = {}

    def drain_events(self) -> list[VmEvent]:
        """No lifecycle events: each round lists what runs."""
        return []

    def close(self) -> None:
        """Nothing to let go of."""

    def running(self) -> list[RunningVm]:
        """The registry's live VMs with their vCPU threads; a VM QMP cannot answer is left out."""
        out = []
        live_keys = set()
        for rec in list_vms(self.registry):
            key = (rec.name, rec.pid, rec.start_ticks)
            live_keys.add(key)
            threads = self._threads.get(key)
            if threads is None:
                try:
                    threads = QemuVm.attach(rec.name, self.registry).vcpu_threads()
                except (UnicacheError, OSError) as err:
                    log.warning("vm=%s: cannot query its vCPU threads: %s", rec.name, err)
                    continue
                self._threads[key] = threads
            # the host channel listens unless QEMU was told to (then another tool talks)
            sock = None if rec.agent_listen else Path(rec.agent_socket)
            nodes = tuple(GuestNode(n.node, n.cpus, n.memory_mib << 20, n.guest_colors())
                          for n in rec.numa)
            out.append(RunningVm(rec.name, rec.pid, threads, sock, rec.memory_mib << 20,
                                 nodes=nodes))
        for key in set(self._threads) - live_keys:
            del self._threads[key]
        return out


if TYPE_CHECKING:
    _check: VmSource = QemuRegistrySource(Path())  # conformance, as mypy sees it
