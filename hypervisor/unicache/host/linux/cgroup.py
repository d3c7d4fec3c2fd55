"""CPU weight of vCPU threads through cgroup v2 ``cpu.weight`` (threaded cgroups).

A vCPU thread gets its own threaded cgroup ``<root>/unicache/<vm>/vcpuN`` under a domain
cgroup ``<root>/unicache/<vm>`` that holds the VM's process. Where the unified hierarchy
has no ``cpu`` controller (cgroup v1 owns it, as on the project's development machine),
:func:`probe_cpu_weight` says so in one line and weights are logged, not applied.
Every move is journaled first so :meth:`CgroupWeights.restore_all` puts processes back;
a weight already written is not written again. This is for unicache's own QEMU: libvirt
domains keep their cgroups and get their credit through libvirt
(:mod:`unicache.host.libvirt.weights`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from unicache.statefile import Checkpoint

#: where cgroup v2 may be mounted, in order of preference
CGROUP2_MOUNTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


@dataclass(frozen=True, slots=True)
class CpuWeightSupport:
    """Whether cpu.weight can be set, and the line that tells users.

    :param root: the cgroup v2 mount with a usable cpu controller, if any.
    :param why: one line for users.
    """

    root: Path | None
    why: str


def _is_cgroup2(path: Path) -> bool:
    return (path / "cgroup.controllers").is_file()


def probe_cpu_weight(mounts: tuple[Path, ...] = CGROUP2_MOUNTS) -> CpuWeightSupport:
    """Find a cgroup v2 hierarchy whose root offers the ``cpu`` controller."""
    for mount in mounts:
        if not _is_cgroup2(mount):
            continue
        controllers = (mount / "cgroup.controllers").read_text().split()
        if "cpu" in controllers:
            return CpuWeightSupport(mount, f"cpu.weight through cgroup v2 at {mount}")
        return CpuWeightSupport(
            None,
            f"cgroup v2 at {mount} has no cpu controller (it has: "
            f"{' '.join(controllers) or 'none'}; cpu is bound to cgroup v1): OBS-C weights "
            "are logged in the decision log, not applied",
        )
    return CpuWeightSupport(None, "no cgroup v2 hierarchy mounted: OBS-C weights are logged only")


def _cgroup_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    raise OSError(f"process {pid} has no cgroup v2 membership")


class CgroupWeights:
    """Sets ``cpu.weight`` per vCPU thread, journaling where each process came from.

    Every write goes through one plan, as tuned's setters with ``sim``: :meth:`set_weight`
    works out the writes, then makes them, or, with ``dry_run``, only returns them.

    :param root: the cgroup v2 mount (from :func:`probe_cpu_weight`).
    :param journal: where original memberships are recorded.
    :param dry_run: write and journal nothing; return what would be written.
    """

    def __init__(self, root: Path, journal: Path, dry_run: bool = False) -> None:
        self.root = root
        self.journal = journal
        self.dry_run = dry_run
        self._checkpoint = Checkpoint(journal, "cgroup-journal", 1)
        self._moved: dict[str, str] = self._load()  # "pid" -> original cgroup path
        self._applied: dict[tuple[str, int, int], int] = {}  # (vm, vcpu, tid) -> weight

    def _load(self) -> dict[str, str]:
        data = self._checkpoint.load()
        return {} if data is None else {str(k): str(v) for k, v in data["moved"].items()}

    def _store(self) -> None:
        self._checkpoint.save({"moved": self._moved})

    def set_weight(self, vm: str, pid: int, vcpu: int, tid: int, weight: int) -> tuple[str, ...]:
        """Give one vCPU thread a cpu.weight.

        :returns: the writes made, in order, one ``path = value`` line each (``path/`` for a
            directory made); with ``dry_run`` the writes that would be made, none made.
            Empty when the weight is already applied.
        :raises OSError: when the cgroup filesystem refuses (or, also in a dry run, the
            process has no cgroup v2 membership).
        """
        domain = self.root / "unicache" / vm
        plan: list[tuple[Path, str | None]] = []  # (path, data); None: make the directory
        original = None
        if str(pid) not in self._moved:
            original = _cgroup_of(pid)
            plan += [
                (domain, None),
                (self.root / "cgroup.subtree_control", "+cpu"),
                (self.root / "unicache" / "cgroup.subtree_control", "+cpu"),
                (domain / "cgroup.procs", str(pid)),
                (domain / "cgroup.subtree_control", "+cpu"),
            ]
        value = max(1, min(weight, 10_000))
        if self._applied.get((vm, vcpu, tid)) != value:
            leaf = domain / f"vcpu{vcpu}"
            if not leaf.is_dir():
                plan += [(leaf, None), (leaf / "cgroup.type", "threaded")]
            plan += [(leaf / "cgroup.threads", str(tid)), (leaf / "cpu.weight", str(value))]
        lines = tuple(f"{path}/" if data is None else f"{path} = {data}" for path, data in plan)
        if self.dry_run or not plan:
            return lines
        if original is not None:
            self._moved[str(pid)] = original
            self._store()  # journaled before the move
        for path, data in plan:
            if data is None:
                path.mkdir(parents=True, exist_ok=True)
            else:
                path.write_text(data)
        self._applied[(vm, vcpu, tid)] = value
        return lines

    def restore_all(self) -> list[str]:
        """Move every journaled process back to its original cgroup and remove ours.

        With ``dry_run``: one line per process that would be moved back, nothing written.
        """
        if self.dry_run:
            return [f"restore: process {pid} would go back in cgroup {original}"
                    for pid, original in sorted(self._moved.items())]
        lines = []
        for pid, original in sorted(self._moved.items()):
            try:
                (self.root / original.lstrip("/") / "cgroup.procs").write_text(pid)
                lines.append(f"restore: process {pid} back in cgroup {original}")
            except OSError as err:
                lines.append(f"restore: process {pid}: {err.strerror or err}")
        self._moved.clear()
        self._applied.clear()
        self._store()
        base = self.root / "unicache"
        if base.is_dir():
            for leaf in sorted(base.glob("*/vcpu*"), reverse=True):
                if not (leaf / "cgroup.threads").read_text().strip():
                    leaf.rmdir()
            for domain in sorted(base.glob("*")):
                if domain.is_dir() and not (domain / "cgroup.procs").read_text().strip():
                    domain.rmdir()
        return lines
