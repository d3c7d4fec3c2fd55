"""The live density run's report: the JSON document and the honest note.

Pure: a :class:`~unicache_sim.density.live.LiveReport` in, data out.

The front end (:mod:`unicache_sim.density.live_cli`) prints the tables from the same
values.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from unicache_sim.density.live import LiveReport, LiveResult
from unicache_sim.density.predict import PredictedPolicy, Prediction
from unicache_sim.density.report import json_number
from unicache_sim.density.search import SloCheck


def note(report: LiveReport) -> str:
    """What the live run shows and what it does not, for this host."""
    accel = report.accel or "accelerator unknown"
    emulated = ("under TCG every guest instruction is emulated, " if "tcg" in accel else "")
    return (
        f"Measured on this host ({report.host}; {accel}): the mechanism end to end (real "
        "guests, the agent and shim in them, the daemon deciding from their reports). "
        f"Guest data is sized down and {emulated}so these latencies are not a cloud host's; "
        "the guests' agent and shim cost CPU on the guests' own vCPUs, and a host with one "
        "LLC group has no cross-LLC sharing for unicache to remove. "
        f"The {report.prediction.label} is the simulator's answer for the same mix and N "
        "at the catalogue's sizes."
    )


def _check(check: SloCheck | None) -> dict[str, Any]:
    if check is None:
        return {"slo": None}
    return {"slo": str(check.kind), "target": json_number(check.target),
            "ratio": json_number(check.ratio), "meets": check.meets}


def _result(r: LiveResult) -> dict[str, Any]:
    m = r.measure
    return {
        "policy": r.policy,
        "guest": r.guest,
        "flavor": r.flavor,
        "requests": m.requests,
        "mean_us": json_number(m.mean_us),
        "p50_us": json_number(m.p50_us),
        "p95_us": json_number(m.p95_us),
        "p99_us": json_number(m.p99_us),
        "per_s": json_number(m.per_s),
        **_check(r.check),
    }


def _predicted(p: PredictedPolicy) -> dict[str, Any]:
    return {
        "policy": p.policy,
        "admitted": p.admitted,
        "tenants": [
            {
                "flavor": t.flavor,
                "vms": t.vms,
                "requests": t.requests,
                "p50_us": json_number(t.p50_us),
                "p95_us": json_number(t.p95_us),
                "p99_us": json_number(t.p99_us),
                **_check(p.check(t.flavor)),
            }
            for t in p.tenants
        ],
    }


def prediction_doc(p: Prediction) -> dict[str, Any]:
    """The prediction's part of the document."""
    return {
        "label": p.label,
        "model": p.model,
        "vms": p.n,
        "references": [{k: json_number(v) for k, v in asdict(r).items()} for r in p.references],
        "policies": [_predicted(x) for x in p.policies],
    }


def document(report: LiveReport, argv: str = "") -> dict[str, Any]:
    """The ``--json`` document (and ``density-live.json``)."""
    req = report.request
    daemon = report.daemon
    return {
        "command": argv,
        "live": True,
        "host": report.host,
        "accel": report.accel,
        "mix": {"name": req.mix.name, "flavors": dict(req.mix.weights)},
        "seconds": req.seconds,
        "policies": list(req.policies),
        "guests": [
            {"name": g.name, "flavor": g.flavor.name, "vcpus": g.vcpus,
             **asdict(g.workload)}
            for g in report.guests
        ],
        "references": [
            {k: json_number(v) for k, v in asdict(r).items()} for r in report.references
        ],
        "results": [_result(r) for r in report.results],
        "daemon": None if daemon is None else {
            "command": daemon.command,
            "exit_code": daemon.exit_code,
            "vms": [asdict(v) for v in daemon.vms],
            "records": dict(daemon.actions),
            "log": str(daemon.log),
        },
        "qemu_left": list(report.left),
        "prediction": prediction_doc(report.prediction),
        "note": note(report),
        "wall_seconds": round(report.seconds, 1),
    }
