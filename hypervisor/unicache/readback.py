"""Reading back what the daemon left: its status file and decision log (status, explain)."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unicache.errors import ConfigError, StateError
from unicache.statefile import status_checkpoint

#: the most decision-log records ``explain`` reads from the end of the log
MAX_RECORDS = 200_000


def read_status(state_dir: Path) -> dict[str, Any]:
    """The daemon's last ``status.json``.

    :raises ConfigError: when there is none (no daemon ran with this state dir).
    """
    checkpoint = status_checkpoint(state_dir)
    try:
        data = checkpoint.load()
    except StateError as err:
        raise ConfigError(f"cannot read {checkpoint.path}: {err.error_message}") from err
    if data is None:
        raise ConfigError(
            f"no daemon status in {state_dir} (is `unicache run` running with this --state-dir?)"
        )
    return data


def read_log(path: Path, limit: int = MAX_RECORDS) -> list[dict[str, Any]]:
    """The last ``limit`` records of a decision log; unparsable lines are skipped.

    :raises ConfigError: when the log cannot be read.
    """
    records: deque[dict[str, Any]] = deque(maxlen=limit)
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
    except OSError as err:
        raise ConfigError(f"cannot read decision log {path}") from err
    return list(records)


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a VM's vCPUs sit where they sit.

    :param vm: the VM.
    :param vcpus: vCPU -> its latest pin record (cpus, unit, reason, tick).
    :param history: every pin and weight record of the VM (or vCPU), oldest first.
    :param placement: the latest placement table record of the VM, if any.
    :param rules: chunk decisions of the VM by Figure 2 rule.
    :param colors: SRM-buffer color runs of the VM (``assign-color``), oldest first.
    :param replicas: NCC records of the VM (``replicate``, ``drop-replica``), oldest first.
    """

    vm: str
    vcpus: dict[int, dict[str, Any]]
    history: list[dict[str, Any]]
    placement: dict[str, Any] | None
    rules: dict[str, int]
    colors: list[dict[str, Any]] = field(default_factory=list)
    replicas: list[dict[str, Any]] = field(default_factory=list)


def explain(records: list[dict[str, Any]], vm: str, vcpu: int | None = None) -> Explanation:
    """Collect the decisions about one VM (and one vCPU) from log records.

    :raises ConfigError: when the log never mentions the VM.
    """
    latest: dict[int, dict[str, Any]] = {}
    history: list[dict[str, Any]] = []
    placement = None
    rules: dict[str, int] = {}
    colors: list[dict[str, Any]] = []
    replicas: list[dict[str, Any]] = []
    seen = False
    for rec in records:
        if rec.get("vm") != vm:
            continue
        seen = True
        kind = rec.get("kind")
        if kind in ("pin-vcpu", "release-vcpu", "set-cpu-weight") and (
            vcpu is None or rec.get("vcpu") == vcpu
        ):
            history.append(rec)
            if kind != "set-cpu-weight":  # where it sits: its last pin or release
                latest[int(rec["vcpu"])] = rec
        elif kind == "publish-placement":
            placement = rec
        elif kind == "chunk-decision":
            rule = str(rec.get("rule"))
            rules[rule] = rules.get(rule, 0) + 1
        elif kind == "chunk-rules" and isinstance(rec.get("rules"), dict):
            for rule, n in rec["rules"].items():
                rules[str(rule)] = rules.get(str(rule), 0) + int(n)
        elif kind == "assign-color":
            colors.append(rec)
        elif kind in ("replicate", "drop-replica"):
            replicas.append(rec)
    if not seen:
        raise ConfigError(f"the decision log never mentions vm {vm!r}")
    return Explanation(vm, latest, history, placement, rules, colors, replicas)


def record_detail(rec: dict[str, Any]) -> str:
    """One decision-log record's action in a few words, for tables."""
    if rec["kind"] == "pin-vcpu":
        return f"cpus {rec['cpus']} (unit {rec['unit']})"
    if rec["kind"] == "release-vcpu":
        return "back on the CPUs it had before unicache"
    if rec["kind"] == "set-cpu-weight":
        return f"cpu.weight {rec['weight']}"
    if rec["kind"] == "assign-color":
        return f"chunks {rec['chunks']} -> color {rec['color']} (guest node {rec['color_node']})"
    if rec["kind"] in ("replicate", "drop-replica"):
        return f"chunk {rec['chunk']} on guest node {rec['node']}"
    entries = rec.get("entries", [])
    cached = sum(1 for e in entries if e["caching"])
    colored = sum(1 for e in entries if e.get("color_node", -1) >= 0)
    replicated = sum(1 for e in entries if e.get("replica_nodes"))
    extra = f", {colored} colored" if colored else ""
    extra += f", {replicated} replicated" if replicated else ""
    return f"v{rec['version']}: {cached} cached, {len(entries) - cached} non-caching{extra}"
