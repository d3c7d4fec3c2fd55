"""The VM registry: one record per running VM, so ``unicache vm list`` and the daemon find it.

The registry directory is env ``UNICACHE_STATE_DIR``, default ``/run/unicache/vms``. A VM
has its record ``<state>/<name>.json`` and a run directory ``<state>/<name>/`` with its
sockets and logs. A record is a :class:`unicache.statefile.Checkpoint` (kind
``vm-record``: written whole, mode 0600, checked on load); a bare record written before
checkpoints is still read, so a VM an older unicache started is still found and stopped.
:func:`list_vms` drops the records whose QEMU is gone and gives back what their start
reserved on the host.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache.errors import ConfigError, StateError
from unicache.host.qemu import colored as hostcolors
from unicache.host.qemu.accel import QEMU_BINARY
from unicache.host.qemu.numa import GuestNodeSpec
from unicache.host.qemu.process import alive
from unicache.statefile import Checkpoint

log = logging.getLogger(__name__)

#: default registry of running VMs (overridden by env ``UNICACHE_STATE_DIR``)
DEFAULT_STATE_DIR = Path("/run/unicache/vms")
#: the checkpoint kind and version of a record
RECORD_KIND = "vm-record"
RECORD_VERSION = 1
#: VM names: used in file names and on QEMU's command line
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def state_dir() -> Path:
    """The VM registry directory: env ``UNICACHE_STATE_DIR``, default ``/run/unicache/vms``."""
    env = os.environ.get("UNICACHE_STATE_DIR")
    return Path(env) if env else DEFAULT_STATE_DIR


def check_name(name: str) -> str:
    """Check a VM name (letters, digits, ``_.-``, at most 63 characters).

    :raises ConfigError: when it is not usable.
    """
    if not _NAME_RE.match(name):
        raise ConfigError(f"bad VM name {name!r}: use letters, digits, '_', '.', '-' (max 63)")
    return name


@dataclass(frozen=True, slots=True)
class VmRecord:
    """A running VM as the registry knows it (``<state>/<name>.json``).

    :param name: the VM.
    :param pid: QEMU's pid.
    :param start_ticks: QEMU's start time (``/proc/PID/stat`` field 22), against pid reuse.
    :param qmp_socket: QMP unix socket.
    :param agent_socket: the agent channel's unix socket.
    :param agent_listen: whether QEMU listens on it (else the host channel does).
    :param control_socket: the demo/test command runner's socket.
    :param console_log: the guest's serial console.
    :param vcpus: number of vCPUs.
    :param memory_mib: guest memory.
    :param accel: ``kvm`` or ``tcg``.
    :param numa: guest NUMA nodes.
    :param run_dir: the VM's run directory.
    :param started: start time (Unix seconds).
    :param qemu: the QEMU executable it runs.
    :param hugepages_added: 2 MiB hugepages unicache reserved for it (given back at stop).
    :param max_map_count_added: how much unicache raised ``vm.max_map_count`` for it.
    """

    name: str
    pid: int
    start_ticks: int
    qmp_socket: str
    agent_socket: str
    agent_listen: bool
    control_socket: str
    console_log: str
    vcpus: int
    memory_mib: int
    accel: str
    numa: tuple[GuestNodeSpec, ...]
    run_dir: str
    started: float
    qemu: str = QEMU_BINARY
    hugepages_added: int = 0
    max_map_count_added: int = 0

    def to_json(self) -> dict[str, Any]:
        """The registry's JSON form (``unicache vm list --json`` prints it)."""
        return {"name": self.name, "pid": self.pid, "start_ticks": self.start_ticks,
                "qmp_socket": self.qmp_socket, "agent_socket": self.agent_socket,
                "agent_listen": self.agent_listen, "control_socket": self.control_socket,
                "console_log": self.console_log, "vcpus": self.vcpus,
                "memory_mib": self.memory_mib, "accel": self.accel,
                "numa": [n.to_json() for n in self.numa], "run_dir": self.run_dir,
                "started": self.started, "qemu": self.qemu,
                "hugepages_added": self.hugepages_added,
                "max_map_count_added": self.max_map_count_added}

    @classmethod
    def from_json(cls, obj: object) -> VmRecord:
        """Parse a registry record.

        :raises ConfigError: when a member is missing or of the wrong type.
        """
        if not isinstance(obj, dict):
            raise ConfigError("a VM record must be a JSON object")
        types: dict[str, type | tuple[type, ...]] = {
            "name": str, "pid": int, "start_ticks": int, "qmp_socket": str,
            "agent_socket": str, "agent_listen": bool, "control_socket": str,
            "console_log": str, "vcpus": int, "memory_mib": int, "accel": str, "numa": list,
            "run_dir": str, "started": (int, float)}
        for key, typ in types.items():
            if not isinstance(obj.get(key), typ):
                raise ConfigError(f"VM record requires {key!r} member of type {typ}")
        # members added later are optional (records of older versions)
        qemu, hp, maps = (obj.get("qemu", QEMU_BINARY), obj.get("hugepages_added", 0),
                          obj.get("max_map_count_added", 0))
        if not isinstance(qemu, str) or not isinstance(hp, int) or not isinstance(maps, int):
            raise ConfigError("VM record's qemu (str), hugepages_added or max_map_count_added "
                              "(int) is malformed")
        return cls(obj["name"], obj["pid"], obj["start_ticks"], obj["qmp_socket"],
                   obj["agent_socket"], obj["agent_listen"], obj["control_socket"],
                   obj["console_log"], obj["vcpus"], obj["memory_mib"], obj["accel"],
                   tuple(GuestNodeSpec.from_json(n) for n in obj["numa"]), obj["run_dir"],
                   float(obj["started"]), qemu, hp, maps)


def record_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint of the record at ``path`` (a bare record of an older version reads too)."""
    return Checkpoint(path, RECORD_KIND, RECORD_VERSION, legacy_unversioned=True)


def write_record(path: Path, rec: VmRecord) -> None:
    """Write a record whole (mode 0600; a crash leaves the previous one).

    :raises OSError: when it cannot be written.
    """
    record_checkpoint(path).save(rec.to_json())


def read_record(path: Path) -> VmRecord | None:
    """Read one registry record.

    :returns: the record, or ``None`` when the file is missing or unreadable.
    """
    try:
        payload = record_checkpoint(path).load()
        return None if payload is None else VmRecord.from_json(payload)
    except (StateError, ConfigError) as err:
        log.warning("ignoring unreadable VM record %s: %s", path, err)
        return None


def release_host(rec: VmRecord) -> None:
    """Give back the hugepages and ``vm.max_map_count`` a stopped VM's start reserved."""
    hostcolors.release_hugepages(rec.hugepages_added)
    hostcolors.release_map_count(rec.max_map_count_added)


def list_vms(state: Path | None = None) -> list[VmRecord]:
    """The running VMs of the registry, by name; records of dead QEMUs are dropped.

    :param state: the registry directory (default :func:`state_dir`).
    :returns: the live records.
    """
    st = state or state_dir()
    out = []
    try:
        paths = sorted(st.glob("*.json"))
    except OSError:
        return []
    for path in paths:
        rec = read_record(path)
        if rec is None:
            continue
        if alive(rec.pid, rec.start_ticks):
            out.append(rec)
        else:
            log.info("vm=%s pid=%d is gone: dropping its record", rec.name, rec.pid)
            with contextlib.suppress(OSError):
                path.unlink()
                release_host(rec)
    return out
