"""The density experiment's report: the JSON document, the summary, the table's rows.

Pure: a :class:`~unicache_sim.density.experiment.DensityReport` in, data out (the front end prints
it, :mod:`unicache_sim.density.plot` draws it).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from unicache_sim.density.experiment import DensityReport, Probe, SearchResult
from unicache_sim.density.mixes import file_heavy
from unicache_sim.density.search import cdf, density_ratio
from unicache_sim.density.tenants import Mix


def ratios(report: DensityReport) -> dict[str, float]:
    """Per mix, unicache's VMs over Linux's (only mixes run under both)."""
    out = {}
    for mix in report.request.mixes:
        linux = report.search(mix.name, "linux")
        uc = report.search(mix.name, "unicache")
        if linux is not None and uc is not None:
            out[mix.name] = density_ratio(uc.vms, linux.vms)
    return out


def binding(search: SearchResult) -> str:
    """What stopped the search one VM above its answer: the failing SLOs there, or the
    admission cap."""
    above = next((p for p in search.probes if p.n == search.vms + 1), None)
    if search.vms >= search.cap:
        return "admission cap"
    if above is None:
        return "-"
    if not above.admitted:
        return "admission"
    failing = [f"{c.flavor} {c.ratio:.2f}x" for c in above.checks if not c.meets]
    return ", ".join(failing) or "-"


def rows(report: DensityReport) -> list[dict[str, Any]]:
    """One row per mix: its flavors, caps, VMs per host per policy, the ratio, what
    binds each policy."""
    out = []
    by = ratios(report)
    cat = report.request.catalogue
    for mix in report.request.mixes:
        row: dict[str, Any] = {
            "mix": mix.name,
            "flavors": mix.label,
            "file_heavy": file_heavy(mix, cat),
        }
        for policy in report.request.policies:
            s = report.search(mix.name, policy)
            if s is None:
                continue
            row[policy] = s.vms
            row[f"{policy}_cap"] = s.cap
            row[f"{policy}_binding"] = binding(s)
        row["ratio"] = by.get(mix.name, math.nan)
        out.append(row)
    return out


def summary(report: DensityReport) -> dict[str, Any]:
    """The acceptance's questions: the ratio's range over all mixes and over the
    file-heavy ones, and how many mixes hold fewer VMs under unicache."""
    by = ratios(report)
    cat = report.request.catalogue
    heavy = [by[m.name] for m in report.request.mixes if m.name in by and file_heavy(m, cat)]
    finite = [r for r in by.values() if not math.isnan(r)]
    return {
        "mixes": len(by),
        "min_ratio": min(finite, default=math.nan),
        "median_ratio": _median(finite),
        "max_ratio": max(finite, default=math.nan),
        "file_heavy_mixes": len(heavy),
        "file_heavy_min_ratio": min(heavy, default=math.nan),
        "mixes_below_linux": sum(1 for r in finite if r < 1.0),
    }


def _median(values: list[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _probe(p: Probe) -> dict[str, Any]:
    return {
        "n": p.n,
        "admitted": p.admitted,
        "worst_ratio": json_number(p.ratio),
        "checks": [
            {
                "flavor": c.flavor,
                "slo": str(c.kind),
                "measured": json_number(c.measured),
                "target": json_number(c.target),
                "ratio": json_number(c.ratio),
                "meets": c.meets,
            }
            for c in p.checks
        ],
        "tenants": [
            {
                "flavor": t.flavor,
                "seed": seed,
                "vms": t.vms,
                "requests": t.requests,
                "p95_us": json_number(t.p95_us),
                "worst_vm_p95_us": json_number(t.worst_vm_p95_us),
                "mb_per_s": json_number(t.mb_per_s),
            }
            for seed, o in enumerate(p.outcomes, 1)
            for t in o.tenants
        ],
    }


def _mix(mix: Mix) -> dict[str, Any]:
    return {"name": mix.name, "flavors": dict(mix.weights)}


def document(report: DensityReport, seconds: float, argv: str = "") -> dict[str, Any]:
    """The ``--json`` document (and ``density.json``)."""
    req = report.request
    return {
        "command": argv,
        "model": req.model,
        "catalogue": req.catalogue.source,
        "policies": list(req.policies),
        "seeds": req.seeds,
        "overcommit": req.overcommit,
        "tolerance": req.tolerance,
        "timing": asdict(req.timing),
        "references": [
            {k: json_number(v) for k, v in asdict(r).items()} for r in report.references
        ],
        "mixes": [
            {
                **_mix(mix),
                "file_heavy": row["file_heavy"],
                "vms": {p: row.get(p) for p in req.policies},
                "cap": {p: row.get(f"{p}_cap") for p in req.policies},
                "binding": {p: row.get(f"{p}_binding") for p in req.policies},
                "ratio": json_number(row["ratio"]),
                "probes": {
                    s.policy: [_probe(p) for p in s.probes]
                    for s in report.searches
                    if s.mix.name == mix.name
                },
            }
            for mix, row in zip(req.mixes, rows(report), strict=True)
        ],
        "cdf": [[json_number(v), share] for v, share in cdf(list(ratios(report).values()))],
        "summary": {k: json_number(v) for k, v in summary(report).items()},
        "points": len(report.points),
        "cached": report.cached,
        "seconds": round(seconds, 1),
    }


def json_number(value: Any) -> Any:
    """A value for JSON: nan as null, inf as a string."""
    # JSON has no nan or inf: null and a string
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf"
    return value
