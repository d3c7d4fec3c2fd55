"""What ``make demo`` checks and explains (tools/demo.py): pure helpers, unit-tested.

Which processes of the demo are left, how much of a stream's page cache the colors put
on the colored nodes, why the demo runs the daemon with ``--always-place`` and what this
host can show, from what it discovered; the decision log's records in words.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from unicache.topology import Topology, Unify

#: the share of the backup stream's page cache that must land on the colored nodes.
#: The stream is 12 MiB read at 2 MiB/s (512 KiB every 0.25 s, longer under TCG), so it
#: runs at least 6 s. Its first report reaches the host an interval (1 s) after the reads
#: and the table with its colors a round after that: with a round of slack, the colors
#: are in the guest within 3 s, half the stream, and SRM colors ahead of the reads from
#: then on. So colors that work put about half of the pages (more under a slower TCG) on
#: the colored nodes; none arriving, or arriving only at the end, puts at most the last
#: few chunks there. A quarter lies between the two with room on both sides: it fails
#: when the colors do not reach the reads, and passes on a slow, busy machine.
COLORED_FLOOR = 0.25


class Started(NamedTuple):
    """A process the demo started, to check at the end that it is gone (a NamedTuple, not a
    dataclass: tests load this file by path, without a module of its own).

    :param pid: its pid.
    :param start_ticks: its start time (``/proc/PID/stat`` field 22), against pid reuse.
    :param what: what it is, for the report.
    """

    pid: int
    start_ticks: int | None
    what: str


def _proc_stat(pid_dir: Path) -> tuple[str, int, int] | None:
    """(state, ppid, start ticks) from ``/proc/PID/stat``, or ``None`` if it is gone."""
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # comm may hold spaces and parentheses
    if len(fields) < 20:
        return None
    return fields[0], int(fields[1]), int(fields[19])


def leftover_processes(started: Sequence[Started], parent: int,
                       proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """The processes of the demo still running: those it recorded (the same pid and start
    time), and any descendant of ``parent`` (the demo itself), whoever started it. Zombies
    have ended and do not count.

    :param started: the processes the demo recorded.
    :param parent: the demo's pid.
    :param proc: the proc filesystem.
    :returns: (pid, what it is) per process left, sorted by pid.
    """
    stats = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            st = _proc_stat(entry)
            if st is not None:
                stats[int(entry.name)] = st
    live = {pid for pid, (state, _, _) in stats.items() if state not in ("Z", "X")}
    left: dict[int, str] = {}
    for s in started:
        st = stats.get(s.pid)
        if s.pid in live and st is not None and s.start_ticks in (None, st[2]):
            left[s.pid] = f"{s.what} (pid {s.pid})"
    for pid in live:
        seen, up = set(), stats[pid][1]
        while up > 1 and up not in seen and up in stats:
            if up == parent:
                left.setdefault(pid, f"a process the demo started (pid {pid})")
                break
            seen.add(up)
            up = stats[up][1]
    return sorted(left.items())


def colored_share(pages: Mapping[int, int], colored_nodes: Sequence[int]) -> float:
    """The share of a file's page-cache pages on the colored guest nodes (0 when none is
    cached).

    :param pages: guest node -> the file's resident pages there.
    :param colored_nodes: the colored nodes.
    """
    total = sum(pages.values())
    return sum(pages.get(n, 0) for n in colored_nodes) / total if total else 0.0


def hot_file_replicas(store: Mapping[str, Mapping[str, Any]],
                      file_ids: set[int]) -> dict[str, dict[str, int]]:
    """The store's files and bytes per node counting only the replicas of ``file_ids``.

    :param store: ``nodeN`` -> ``files``, ``bytes`` and ``sizes`` (replica file name ->
        bytes it holds; names are ``FILE_ID.CHUNK.CHUNK_SIZE.SEQ``, the id in hex).
    :param file_ids: the files whose replicas count.
    """
    out: dict[str, dict[str, int]] = {}
    for node, held in store.items():
        sizes = [size for name, size in held.get("sizes", {}).items()
                 if int(name.split(".", 1)[0], 16) in file_ids]
        out[node] = {"files": len(sizes), "bytes": sum(sizes)}
    return out


def shared_replica_failure(store: Mapping[str, Mapping[str, int]], node: int,
                           replicated: int, mappings: int, processes: int,
                           copy_bytes: int) -> str | None:
    """Whether ``processes`` readers on guest node ``node`` were served from one copy.

    :param store: the agent's replica store as the guest reports it: ``nodeN`` -> files
        and bytes its tmpfs holds.
    :param replicated: chunks the host replicated on that node for the hot file.
    :param mappings: replica mappings the readers' shims took (the shims' fills).
    :param processes: reader processes that ran.
    :param copy_bytes: node memory one replica of a chunk holds.
    :returns: what did not hold, or None when one copy per chunk served them all.
    """
    held = store.get(f"node{node}", {})
    files, used = held.get("files", 0), held.get("bytes", 0)
    # a chunk replicated after the readers stopped has no copy: nobody asked for it
    if not 1 <= files <= replicated:
        return (f"replicas: {files} replica files on node {node} for {replicated} replicated "
                "chunks (one copy of each chunk read expected)")
    if used != files * copy_bytes:
        return f"replicas: node {node} holds {used} bytes, not {files} copies of {copy_bytes}"
    if mappings < processes * files:
        return (f"replicas: {mappings} mappings of {files} copies by {processes} processes: "
                "not every process was served from the shared copy")
    return None


def always_place_note(host: Topology, accel: str, accel_reason: str,
                      counters: tuple[bool, str]) -> str:
    """Why the demo runs the daemon with --always-place, from what it discovered: the host's
    topology, the accelerator the probe chose and the counter probe.

    :param host: the host's topology (sysfs).
    :param accel: ``kvm`` or ``tcg``.
    :param accel_reason: why the probe chose it.
    :param counters: :func:`~unicache.host.linux.perf.hardware_counters_available`.
    :returns: one paragraph.
    """
    units = host.units(Unify.L2)
    llc = host.llc
    reasons = []
    if len({u.llc_group for u in units}) == 1:
        reasons.append(
            f"this host's {len(units)} L2 unit{'s' if len(units) > 1 else ''} share one "
            f"{llc.size_bytes >> 20} MiB L{llc.level}, so a read moved between units still "
            "finds the same LLC")
    if accel == "tcg":
        reasons.append(f"the guest runs under TCG ({accel_reason}): its reads are emulated, "
                       "so their rate says little about the caches SCU's watch measures")
    if not counters[0]:
        reasons.append(f"the host has no LLC counters ({counters[1].split(';')[0]}): SRM "
                       "colors only where co-runners' LLC counters predict a gain, so it "
                       "colors nothing, and OBS weighs vCPUs by the guest's reports alone")
    if not reasons:
        return ("--always-place: this host has several LLC groups, a KVM guest and LLC "
                "counters, so the cost models could decide alone; the demo still makes every "
                "mechanism act, to show and check each one in a short run (docs/policies.md "
                "'Never slower')")
    return ("--always-place: " + "; ".join(reasons) + ". Here SCU's cost model and watch "
            "may leave the guest alone and SRM's step-aside leaves it uncolored; the demo "
            "makes every mechanism act, to show and check it, at no gain here "
            "(docs/policies.md 'Never slower')")


def host_note(host: Topology, accel: str) -> str:
    """What this host is, discovered: why 'on' here cannot show a cache effect."""
    groups = host.llc_groups()
    llc = max(host.levels, key=lambda lv: lv.level)
    where = "a virtual machine" if _is_virtual() else "bare metal"
    if len(groups) == 1:
        shared = (f"this host's {len(host.cpus)} CPUs share one {llc.size_bytes >> 20} MiB "
                  f"L{llc.level}, so both runs are served from the same cache")
    else:
        shared = f"this host has {len(groups)} LLC groups"
    return (f"Honest note: {shared}; the guest runs under {accel.upper()} on {where}. What "
            "'on' adds here is the shim's work and its thread migrations, not more cache. "
            "The cache effect is shown by the simulator below.")


def _is_virtual() -> bool:
    try:
        flags = next(x for x in Path("/proc/cpuinfo").read_text().splitlines()
                     if x.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return " hypervisor" in flags


def log_records(log: Path, *kinds: str, since: int = 0) -> list[dict[str, Any]]:
    """The decision log's records of some kinds from tick ``since`` on, oldest first."""
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in records if r.get("kind") in kinds and int(r.get("tick", 0)) >= since]


def last_tick(log: Path) -> int:
    """The daemon's latest round in the decision log."""
    return max((int(json.loads(line).get("tick", 0)) for line in log.read_text().splitlines()),
               default=0)


def per_vcpu_reads(log: Path, vm: str) -> dict[str, dict[int, int]]:
    """Chunk -> vCPU -> bytes, summed over the guest reports in the decision log."""
    reads: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "guest-report" and rec.get("vm") == vm:
            for chunk in rec["chunks"]:
                for vcpu, nbytes in chunk["vcpu_bytes"]:
                    reads[f"{chunk['file']}:{chunk['chunk']}"][vcpu] += nbytes
    return reads


def describe_entry(entry: dict[str, object]) -> str:
    """One placement table entry in words (its fields: docs/daemon.md, decision log)."""
    where = f"chunk {entry['file']}:{entry['chunk']}"
    extras = []
    if entry.get("color_node", -1) != -1:
        extras.append(f"page cache on colored guest node {entry['color_node']}")
    if entry.get("replica_nodes"):
        extras.append(f"replicas on guest nodes {entry['replica_nodes']}")
    tail = ("; " + "; ".join(extras)) if extras else ""
    if not entry.get("vcpus"):
        return f"{where}: never migrates (an entry for its colors or replicas only){tail}"
    if not entry.get("caching"):
        return (f"{where}: read with non-caching loads from any vCPU ({entry['vcpus']}): "
                f"no unit keeps it{tail}")
    vcpus = str(entry["vcpus"])
    to = f"one of vCPUs {vcpus}" if any(c in vcpus for c in ",-") else f"vCPU {vcpus}"
    return (f"{where}: cached in unit {entry['unit']}; a read of at least the table's "
            f"min_read_size moves its thread to {to} first{tail}")
