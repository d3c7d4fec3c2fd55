"""The example traces in examples/ show what their names promise (docs/trace.md): replayed
with ``unicache replay``, each makes decisions of its kind, and none of the other kinds.

They are regenerated from the simulator with ``make examples`` (``tools/gen_traces.py``);
a change of the simulator or of the policies that takes a decision away from an example
fails here, and the example is to be regenerated (or its workload changed) until it
shows it again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from unicache.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

Replayed = dict[str, Any]


def _scu_placement(done: Replayed) -> bool:
    """SCU placed a VM's chunks (MFC): a table whose Figure 2 rules migrate a reader."""
    tables = [a for a in done["actions"] if a["kind"] == "publish-placement"]
    migrations = [d for d in done["chunk_decisions"] if "migrate" in d["rule"]]
    return bool(tables and migrations and any("fig2:" in t["reason"] for t in tables))


def _obs_separation(done: Replayed) -> bool:
    """OBS kept cache-heavy vCPUs apart: OBS-X's rebalance moved one out of the heaviest
    unit, and OBS-L paired heavy and light vCPUs on a CPU."""
    reasons = [a["reason"] for a in done["actions"] if a["kind"] == "pin-vcpu"]
    return any(r.startswith("OBS-X: rebalance moved") for r in reasons) and any(
        r.startswith("OBS-L: heavy vCPU") for r in reasons
    )


def _colors(done: Replayed) -> bool:
    """SRM-buffer gave a stream's chunks colored nodes."""
    return any(a["kind"] == "assign-color" for a in done["actions"])


def _replicas(done: Replayed) -> bool:
    """NCC replicated a chunk read from a remote node, and dropped replicas on a write."""
    kinds = {a["kind"] for a in done["actions"]}
    return {"replicate", "drop-replica"} <= kinds


#: every kind of decision an example shows, by name
KINDS: dict[str, Callable[[Replayed], bool]] = {
    "scu-placement": _scu_placement,
    "obs-separation": _obs_separation,
    "colors": _colors,
    "replicas": _replicas,
}

#: each example trace and the kinds of decision its replay makes (docs/trace.md)
EXPECTED: dict[str, frozenset[str]] = {
    "opteron16-uniform.jsonl": frozenset({"scu-placement"}),
    "opteron16-zipf.jsonl": frozenset({"scu-placement"}),
    "xeon5300-cachebuster-spinloop.jsonl": frozenset({"obs-separation"}),
    "opteron242-colors-replicas.jsonl": frozenset({"colors", "replicas"}),
}


def _replay(name: str) -> Replayed:
    result = CliRunner().invoke(app, ["replay", "--trace", str(EXAMPLES / name), "--json"])
    assert result.exit_code == 0, result.output
    done: Replayed = json.loads(result.stdout)
    assert not done["skipped"] and not done["failed"], (done["skipped"], done["failed"])
    return done


def _kinds(done: Replayed) -> frozenset[str]:
    return frozenset(kind for kind, made in KINDS.items() if made(done))


def test_every_example_trace_has_its_kinds_of_decision() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.jsonl")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_example_trace_replay_makes_a_decision_of_its_kind(name: str) -> None:
    made = _kinds(_replay(name))
    missing = EXPECTED[name] - made
    assert not missing, f"{name}: no decision of kind {sorted(missing)} (made {sorted(made)})"
    other = made - EXPECTED[name]
    assert not other, f"{name}: also decisions of kind {sorted(other)}, which it does not show"
