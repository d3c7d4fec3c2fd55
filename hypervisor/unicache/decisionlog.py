"""Decision records: every action and chunk decision as one JSON object with its reason.

The same records go to the daemon's JSON-lines decision log, to ``replay --json`` and to
``explain``; humans see them as tables. :class:`DecisionLog` writes the file: bounded
(rotated at a size, a few old files kept) and never fatal (a write error is counted,
reported once, and the records of that round are dropped).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from unicache.cpulist import format_list
from unicache.model import (
    Action,
    AssignColor,
    ChunkDecision,
    DropReplica,
    GuestReport,
    PinVcpu,
    PublishPlacement,
    Refusal,
    ReleaseVcpu,
    Replicate,
    SetCpuWeight,
)

log = logging.getLogger(__name__)

#: record kinds echoed to the console (chunk decisions and reports stay in the log file)
ECHO_KINDS = frozenset({
    "note", "pin-vcpu", "release-vcpu", "set-cpu-weight", "publish-placement", "assign-color",
    "replicate", "drop-replica", "failed",
})
#: rotated files kept beside the log (``decisions.jsonl.1`` is the newest)
KEEP_ROTATED = 3


def _open_private(path: Path) -> IO[str]:
    """Open the log for appending, mode 0600 (it names VMs, files' chunks and their
    placement: the host's business, not every local user's), never through a link."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a log an older version left 0644
        return os.fdopen(fd, "a", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


@dataclass
class DecisionLog:
    """Appends JSON records, one per line, flushed every round.

    At ``max_bytes`` the file is rotated (``.1`` .. ``.KEEP_ROTATED``, the oldest dropped),
    so the log never holds more than ``(KEEP_ROTATED + 1) * max_bytes``. A failed open,
    write or rotation (a full disk) drops what could not be written, counts it in
    ``errors`` and is reported once; the next round tries again.

    :param path: the log file.
    :param echo: also print a human line per record of :data:`ECHO_KINDS` (``None`` =
        silent).
    :param max_bytes: rotate at this size.
    :param echo_json: echo every record as the log's own JSON line instead.
    """

    path: Path
    echo: IO[str] | None = None
    max_bytes: int = 64 << 20
    echo_json: bool = False
    errors: int = 0
    _out: IO[str] | None = field(default=None, init=False)
    _size: int = field(default=0, init=False)
    _reported: bool = field(default=False, init=False)

    def open(self) -> None:
        """Open for appending (creating the directory); a failure is counted, not raised."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._out = _open_private(self.path)
            self._size = self._out.tell()
        except OSError as err:
            self._failed(err)

    def write(self, record: dict[str, Any]) -> None:
        """Append one record, stamped with the wall-clock time."""
        record = {"time": round(time.time(), 3), **record}
        line = json.dumps(record, separators=(",", ":")) + "\n"
        if self._out is not None:
            try:
                if self._size + len(line) > self.max_bytes and self._size > 0:
                    self._rotate()
                self._out.write(line)
                self._size += len(line)
            except OSError as err:
                self._failed(err)
        if self.echo is not None and self.echo_json:
            self.echo.write(line)
        elif self.echo is not None and record["kind"] in ECHO_KINDS:
            target = record.get("target") or record.get("vm") or ""
            self.echo.write(
                f"[{record.get('tick', '-')}] {record['kind']} {target}: "
                f"{record.get('reason') or record.get('message', '')}\n"
            )

    def flush(self) -> None:
        """Flush to disk and to the echo stream; reopen a log that failed before."""
        if self._out is None:
            self.open()
        else:
            try:
                self._out.flush()
            except OSError as err:
                self._failed(err)
        if self.echo is not None:
            self.echo.flush()

    def close(self) -> None:
        """Close the file."""
        if self._out is not None:
            try:
                self._out.close()
            except OSError as err:
                self._failed(err)
            self._out = None

    def _rotate(self) -> None:
        assert self._out is not None
        self._out.close()
        self._out = None
        for i in range(KEEP_ROTATED - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        self._out = _open_private(self.path)
        self._size = 0

    def _failed(self, err: OSError) -> None:
        self.errors += 1
        if self._out is not None:
            with contextlib.suppress(OSError):
                self._out.close()
            self._out = None
        if not self._reported:
            self._reported = True
            log.warning(
                "decision log %s cannot be written (%s): records are dropped and counted "
                "until it can be again", self.path, err
            )


def action_record(tick: int, action: Action) -> dict[str, Any]:
    """One action as a flat JSON-ready record.

    :param tick: the round it was decided in.
    :param action: the action.
    """
    record: dict[str, Any] = {"tick": tick, "kind": str(action.kind), "target": action.target}
    if isinstance(action, PinVcpu):
        record.update(
            vm=action.vcpu.vm,
            vcpu=action.vcpu.index,
            cpus=format_list(action.cpus),
            unit=action.unit,
        )
    elif isinstance(action, ReleaseVcpu):
        record.update(vm=action.vcpu.vm, vcpu=action.vcpu.index)
    elif isinstance(action, SetCpuWeight):
        record.update(vm=action.vcpu.vm, vcpu=action.vcpu.index, weight=action.weight)
    elif isinstance(action, PublishPlacement):
        table = action.table
        record.update(
            vm=action.vm,
            version=table.version,
            chunk_size=table.chunk_size,
            min_read_size=table.min_read_size,
            entries=[
                {
                    "file": f"{e.chunk.file_id:x}",
                    "chunk": e.chunk.index,
                    "unit": e.unit,
                    "vcpus": format_list(e.vcpus),
                    "caching": e.caching,
                    "migration_budget": e.migration_budget,
                    "color_node": e.color_node,
                    "replica_nodes": format_list(e.replica_nodes),
                }
                for e in table.entries
            ],
        )
    elif isinstance(action, AssignColor):
        record.update(
            vm=action.vm,
            file=f"{action.file_id:x}",
            chunks=f"{action.first_chunk}-{action.last_chunk}",
            color=action.color,
            color_node=action.color_node,
            rule=action.rule,
        )
    elif isinstance(action, Replicate | DropReplica):
        record.update(
            vm=action.vm,
            file=f"{action.chunk.file_id:x}",
            chunk=action.chunk.index,
            node=action.node,
            rule=action.rule,
        )
    record["reason"] = action.reason
    return record


def chunk_record(tick: int, decision: ChunkDecision) -> dict[str, Any]:
    """One per-chunk decision as a JSON-ready record (``--log-chunks``)."""
    return {
        "tick": tick,
        "kind": "chunk-decision",
        "vm": decision.vm,
        "file": f"{decision.chunk.file_id:x}",
        "chunk": decision.chunk.index,
        "unit": decision.unit,
        "caching": decision.caching,
        "rule": decision.rule,
        "reason": decision.reason,
    }


def chunk_rules_records(tick: int, decisions: Iterable[ChunkDecision]) -> list[dict[str, Any]]:
    """Per VM, how many chunk decisions each Figure 2 rule made this round: the default in
    place of one :func:`chunk_record` per chunk, whose number a guest decides."""
    by_vm: dict[str, Counter[str]] = {}
    for decision in decisions:
        by_vm.setdefault(decision.vm, Counter())[decision.rule] += 1
    return [
        {
            "tick": tick,
            "kind": "chunk-rules",
            "vm": vm,
            "rules": dict(sorted(rules.items())),
            "reason": ", ".join(f"{rule} x{n}" for rule, n in sorted(rules.items())),
        }
        for vm, rules in sorted(by_vm.items())
    ]


def refusal_record(tick: int, refusal: Refusal) -> dict[str, Any]:
    """Something a policy chose not to do, and why (e.g. SCU leaving a VM alone)."""
    return {"tick": tick, "kind": "refusal", "refusal": refusal.kind, "reason": refusal.reason}


def _report_head(tick: int, report: GuestReport) -> dict[str, Any]:
    return {
        "tick": tick,
        "kind": "guest-report",
        "vm": report.vm,
        "seq": report.seq,
        "interval_s": report.interval_s,
        "id_space": report.id_space,
    }


def report_summary_record(tick: int, report: GuestReport) -> dict[str, Any]:
    """What a guest reported, summed: the default in place of :func:`report_record`, whose
    size a guest decides (a record per chunk)."""
    by_vcpu: Counter[int] = Counter()
    for access in report.chunks:
        for vcpu, nbytes in access.vcpu_bytes:
            by_vcpu[vcpu] += nbytes
    nbytes = sum(a.bytes_read for a in report.chunks)
    return {
        **_report_head(tick, report),
        "chunks": len(report.chunks),
        "files": len({a.chunk.file_id for a in report.chunks}),
        "bytes": nbytes,
        "reads": sum(a.reads for a in report.chunks),
        "writes": sum(a.writes for a in report.chunks),
        "vcpu_bytes": [[v, n] for v, n in sorted(by_vcpu.items())],
        "modified_files": len(report.modified_files),
        "reason": f"{len(report.chunks)} chunks, {nbytes} bytes read in {report.interval_s:g} s",
    }


def report_record(tick: int, report: GuestReport) -> dict[str, Any]:
    """What a guest reported (already validated and bounded by the channel), chunk by chunk
    (``--log-chunks``)."""
    return {
        **_report_head(tick, report),
        "chunks": [
            {
                "file": f"{a.chunk.file_id:x}",
                "chunk": a.chunk.index,
                "bytes": a.bytes_read,
                "reads": a.reads,
                "writes": a.writes,
                "vcpu_bytes": [list(p) for p in a.vcpu_bytes],
                "home_node": a.home_node,
                "node_reads": [list(p) for p in a.node_reads],
            }
            for a in report.chunks
        ],
        "node_memory": [[m.node, m.free_bytes, m.total_bytes] for m in report.node_memory],
        "modified_files": [f"{f:x}" for f in sorted(report.modified_files)],
        "reason": f"{len(report.chunks)} chunks read in {report.interval_s:g} s",
    }
