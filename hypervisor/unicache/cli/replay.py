"""``unicache replay``: a recorded observation trace through the policies."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from unicache.cli.common import (
    UNIFY_CHOICE,
    FileOpt,
    JsonOpt,
    ModelOpt,
    app,
    err,
    kib,
    out,
)
from unicache.decisionlog import action_record, chunk_record, refusal_record
from unicache.host.replay import ReplayHost
from unicache.loop import run_rounds_sync
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.readback import record_detail
from unicache.topology import Unify
from unicache.topology.sysfs import load_topology
from unicache.trace import read_trace

#: the options of ``replay``, one alias each (the command's signature stays short)
_ReplayTrace = Annotated[
    Path, typer.Option("--trace", "-t", help="Observation trace (JSON lines).")
]
_ReplayUnify = Annotated[
    str | None,
    typer.Option(
        "--unify",
        click_type=UNIFY_CHOICE,
        help="Cache unit (default: the trace header's, else llc).",
    ),
]
_ReplayChunks = Annotated[
    bool, typer.Option("--chunks", help="Also show every per-chunk decision.")
]


@app.command()
def replay(
    trace: _ReplayTrace,
    model: ModelOpt = None,
    file: FileOpt = None,
    unify: _ReplayUnify = None,
    json_out: JsonOpt = False,
    chunks: _ReplayChunks = False,
) -> None:
    """Feed a recorded observation trace through the policies and print their actions.

    The machine is --model/--file, else the model named in the trace header, else this
    host. Malformed trace lines are reported with their line number and skipped.
    """
    parsed = read_trace(trace)
    if model is None and file is None:
        model = parsed.header.model
    topo = load_topology(model, file)
    level = Unify(unify or parsed.header.unify or "llc")
    policy = UnicachePolicy(topo, level)
    for number, why in parsed.skipped:
        sys.stderr.write(f"{trace}:{number}: skipped: {why}\n")
    if policy.scu.options.cost_source != "model":
        err.print(
            f"note: {topo.name} has no figures for SCU costs; using "
            f"{policy.scu.options.cost_source} (see docs/policies.md)",
            highlight=False,
        )
    host = ReplayHost(parsed, frozenset(c.cpu for c in topo.cpus))
    done = _replayed(host, policy)
    if json_out:
        _print_json(topo.name, level, policy, parsed.skipped, done)
        return
    _print_tables(topo.name, level, policy, done, chunks)


@dataclass(slots=True)
class _Replayed:
    """What the rounds of a replay decided, as decision-log records."""

    records: list[dict[str, Any]] = field(default_factory=list)
    chunk_records: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    refusals: list[dict[str, Any]] = field(default_factory=list)
    rules: Counter[str] = field(default_factory=Counter)


def _replayed(host: ReplayHost, policy: UnicachePolicy) -> _Replayed:
    """Every round of the trace through the policy."""
    done = _Replayed()
    for rnd in run_rounds_sync(host, policy, RoundState()):
        done.records.extend(action_record(rnd.tick, a) for a in rnd.decision.actions)
        done.refusals.extend(refusal_record(rnd.tick, r) for r in rnd.decision.refusals)
        done.chunk_records.extend(
            chunk_record(rnd.tick, d) for d in rnd.decision.chunk_decisions
        )
        done.rules.update(d.rule for d in rnd.decision.chunk_decisions)
        done.failures.extend(
            {**action_record(rnd.tick, a), "error": why} for a, why in rnd.result.failed
        )
    return done


def _print_json(
    model: str,
    level: Unify,
    policy: UnicachePolicy,
    skipped: Sequence[tuple[int, str]],
    done: _Replayed,
) -> None:
    opts = policy.scu.options
    print(
        json.dumps(
            {
                "model": model,
                "unify": str(level),
                "units": len(policy.units),
                "scu": {
                    "min_read_size": opts.params.min_read_size,
                    "chunk_size": opts.chunk_size,
                    "busy_threshold": opts.params.busy_threshold,
                    "idle_threshold": opts.params.idle_threshold,
                    "cost_source": opts.cost_source,
                },
                "skipped": [{"line": n, "why": w} for n, w in skipped],
                "actions": done.records,
                "chunk_decisions": done.chunk_records,
                "rules": dict(sorted(done.rules.items())),
                "refusals": done.refusals,
                "failed": done.failures,
            },
            indent=1,
        )
    )


def _print_tables(
    model: str, level: Unify, policy: UnicachePolicy, done: _Replayed, chunks: bool
) -> None:
    opts = policy.scu.options
    out.print(
        f"[bold]{model}[/bold], --unify {level}: {len(policy.units)} units; "
        f"min_read_size {opts.params.min_read_size} B, chunk size {kib(opts.chunk_size)}"
    )
    table = Table("tick", "action", "target", "detail", "reason", title="actions")
    for rec in done.records:
        detail = record_detail(rec)
        table.add_row(str(rec["tick"]), rec["kind"], rec["target"], detail, rec["reason"])
    out.print(table)
    if done.refusals:
        # what a policy chose not to do, and why (SCU stepping aside where it predicts no gain)
        rtable = Table("tick", "refusal", "reason", title="left alone")
        for rec in done.refusals:
            rtable.add_row(str(rec["tick"]), rec["refusal"], rec["reason"])
        out.print(rtable)
    if chunks:
        ctable = Table("tick", "vm", "chunk", "unit", "load", "rule", title="chunk decisions")
        for rec in done.chunk_records:
            ctable.add_row(
                str(rec["tick"]),
                rec["vm"],
                f"{rec['file']}:{rec['chunk']}",
                str(rec["unit"]),
                "caching" if rec["caching"] else "non-caching",
                rec["rule"],
            )
        out.print(ctable)
    summary = Table("Figure 2 rule", "decisions", title="chunk decisions by rule")
    for rule, n in sorted(done.rules.items()):
        summary.add_row(rule, str(n))
    out.print(summary)
    for fail in done.failures:
        err.print(f"failed: {fail['target']}: {fail['error']}", highlight=False)
