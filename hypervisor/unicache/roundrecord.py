"""What a daemon round leaves behind: its decision-log records, the status, the round state.

The loop (:mod:`unicache.loop`) yields each round; the daemon hands it here, in a worker
thread, so that a disk that stalls never stalls the channels and signals it serves. A
status or state that cannot be written (a full disk) is noted and tried again the next
round: the daemon never stops for its files.
"""

from __future__ import annotations

import time
from pathlib import Path

from unicache import policystate
from unicache.cpulist import format_list
from unicache.decisionlog import (
    DecisionLog,
    action_record,
    chunk_record,
    chunk_rules_records,
    refusal_record,
    report_record,
    report_summary_record,
)
from unicache.loop import RoundResult
from unicache.metrics import DaemonMetrics
from unicache.model import Observation
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.statefile import status_checkpoint


def record_round(
    decisions: DecisionLog,
    policy: UnicachePolicy,
    rnd: RoundResult,
    metrics: DaemonMetrics,
    errors: list[tuple[str, str, int]],
    state_dir: Path,
    dry_run: bool = False,
    log_chunks: bool = False,
    channel_bytes: list[tuple[str, int, int]] | None = None,
) -> None:
    """Log one round's actions, reports, chunk rules and refusals; write the status and the
    round state; update the metrics (the daemon calls it in a worker thread: file I/O).

    :param decisions: the decision log.
    :param policy: the policy (its units, for the status).
    :param rnd: the round the loop yielded.
    :param metrics: the Prometheus metrics.
    :param errors: per VM, its channel's error counts.
    :param state_dir: where the status and the round state go.
    :param dry_run: mark every action ``dry_run``, with the ``would_write`` lines the
        setters returned, and leave the round state unwritten.
    :param log_chunks: every chunk of every report and every chunk decision, not summaries.
    :param channel_bytes: per VM, its channel's bytes in and out since start (metrics).
    """
    obs, decision, state, result = rnd.observation, rnd.decision, rnd.state, rnd.result
    dry = {"dry_run": True} if dry_run else {}
    for action, would_write in result.applied_with_writes():
        record = {**action_record(obs.tick, action), **dry}
        if dry_run:  # what the setter's dry-run path returned: the writes it would make
            record["would_write"] = list(would_write)
        decisions.write(record)
    for action, failure in result.failed:
        record = action_record(obs.tick, action)
        decisions.write({**record, "kind": "failed", "error": failure, **dry})
    if log_chunks:
        for report in obs.reports:
            decisions.write(report_record(obs.tick, report))
        for chunk in decision.chunk_decisions:
            decisions.write(chunk_record(obs.tick, chunk))
    else:
        for report in obs.reports:
            decisions.write(report_summary_record(obs.tick, report))
        for rules in chunk_rules_records(obs.tick, decision.chunk_decisions):
            decisions.write(rules)
    for refusal in decision.refusals:
        decisions.write(refusal_record(obs.tick, refusal))
    decisions.flush()
    try:
        write_status(state_dir, obs.tick, policy, state, obs)
        if not dry_run:  # a dry run leaves the next run nothing it did not learn
            policystate.save(state_dir, state)
    except OSError as err:  # a full disk: the next round tries again, the daemon runs on
        decisions.write({"kind": "note", "message": f"round {obs.tick}: state not saved: {err}"})
    metrics.update(policy, state, obs, result, errors, channel_bytes or ())


def write_status(
    state_dir: Path, tick: int, policy: UnicachePolicy, state: RoundState, obs: Observation
) -> None:
    """Write what ``unicache status`` and ``unicache place`` read (a checkpoint)."""
    weights = state.obs.weights
    unit_of = state.obs.unit_of
    table = state.scu.table
    sources = {s.vcpu: str(s.source) for s in obs.samples}
    status = {
        "time": round(time.time(), 3),
        "tick": tick,
        "unify": str(policy.unify),
        "units": [
            {
                "id": u.id,
                "cpus": format_list(u.cpus),
                "capacity_bytes": u.capacity_bytes,
                "cache_load": sum(w for v, w in weights.items() if unit_of.get(v) == u.id),
                "vcpus": sum(1 for v in unit_of.values() if v == u.id),
                "assigned_bytes": 0 if table is None else table.assigned_bytes(u.id),
            }
            for u in policy.units
        ],
        "vcpus": [
            {
                "vm": v.vm,
                "vcpu": v.index,
                "unit": unit_of[v],
                "cache_weight": weights.get(v, 0.0),
                "source": sources.get(v),
            }
            for v in sorted(unit_of)
        ],
    }
    status_checkpoint(state_dir).save(status)
