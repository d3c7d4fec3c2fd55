"""``unicache replay``: a recorded observation trace through the policies."""

from __future__ import annotations

import json
import sys
from collections import Counter
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
    records: list[dict[str, Any]] = []
    chunk_records: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    refusals: list[dict[str, Any]] = []
    rules: Counter[str] = Counter()
    for rnd in run_rounds_sync(host, policy, RoundState()):
        records.extend(action_record(rnd.tick, a) for a in rnd.decision.actions)
        refusals.extend(refusal_record(rnd.tick, r) for r in rnd.decision.refusals)
        chunk_records.extend(chunk_record(rnd.tick, d) for d in rnd.decision.chunk_decisions)
        rules.update(d.rule for d in rnd.decision.chunk_decisions)
        failures.extend(
            {**action_record(rnd.tick, a), "error": why} for a, why in rnd.result.failed
        )
    opts = policy.scu.options
    if json_out:
        print(
            json.dumps(
                {
                    "model": topo.name,
                    "unify": str(level),
                    "units": len(policy.units),
                    "scu": {
                        "min_read_size": opts.params.min_read_size,
                        "chunk_size": opts.chunk_size,
                        "busy_threshold": opts.params.busy_threshold,
                        "idle_threshold": opts.params.idle_threshold,
                        "cost_source": opts.cost_source,
                    },
                    "skipped": [{"line": n, "why": w} for n, w in parsed.skipped],
                    "actions": records,
                    "chunk_decisions": chunk_records,
                    "rules": dict(sorted(rules.items())),
                    "refusals": refusals,
                    "failed": failures,
                },
                indent=1,
            )
        )
        return
    out.print(
        f"[bold]{topo.name}[/bold], --unify {level}: {len(policy.units)} units; "
        f"min_read_size {opts.params.min_read_size} B, chunk size {kib(opts.chunk_size)}"
    )
    table = Table("tick", "action", "target", "detail", "reason", title="actions")
    for rec in records:
        detail = record_detail(rec)
        table.add_row(str(rec["tick"]), rec["kind"], rec["target"], detail, rec["reason"])
    out.print(table)
    if refusals:
        # what a policy chose not to do, and why (SCU stepping aside where it predicts no gain)
        rtable = Table("tick", "refusal", "reason", title="left alone")
        for rec in refusals:
            rtable.add_row(str(rec["tick"]), rec["refusal"], rec["reason"])
        out.print(rtable)
    if chunks:
        ctable = Table("tick", "vm", "chunk", "unit", "load", "rule", title="chunk decisions")
        for rec in chunk_records:
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
    for rule, n in sorted(rules.items()):
        summary.add_row(rule, str(n))
    out.print(summary)
    for fail in failures:
        err.print(f"failed: {fail['target']}: {fail['error']}", highlight=False)
