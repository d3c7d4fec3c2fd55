"""Decision records: every action and chunk decision as one JSON object with its reason.

The same records go to the daemon's JSON-lines decision log, to ``replay --json`` and to
``explain``; humans see them as tables.
"""

from __future__ import annotations

from typing import Any

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
    Replicate,
    SetCpuWeight,
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
    """One per-chunk decision as a JSON-ready record."""
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


def refusal_record(tick: int, refusal: Refusal) -> dict[str, Any]:
    """Something a policy chose not to do, and why (e.g. SCU leaving a VM alone)."""
    return {"tick": tick, "kind": "refusal", "refusal": refusal.kind, "reason": refusal.reason}


def report_record(tick: int, report: GuestReport) -> dict[str, Any]:
    """What a guest reported (already validated and bounded by the channel)."""
    return {
        "tick": tick,
        "kind": "guest-report",
        "vm": report.vm,
        "seq": report.seq,
        "interval_s": report.interval_s,
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
