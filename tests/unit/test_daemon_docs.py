"""docs/daemon.md's decision log table names exactly the record kinds the daemon writes, and
exactly the refusal kinds the policies log."""

from __future__ import annotations

import re
from pathlib import Path

from unicache.model import ActionKind

ROOT = Path(__file__).resolve().parents[2]
#: the modules that write decision records
WRITERS = tuple(ROOT / "hypervisor/unicache" / name
                for name in ("daemon.py", "roundrecord.py", "decisionlog.py"))


def _documented() -> set[str]:
    text = (ROOT / "docs/daemon.md").read_text()
    start = text.index("| kind |", text.index("## Decision log"))
    table = text[start: text.index("\n\n", start)].splitlines()[2:]  # rows, no header
    kinds: set[str] = set()
    for row in table:
        kinds.update(re.findall(r"`([a-z-]+)`", row.split("|")[1]))
    return kinds


def _written() -> set[str]:
    literal = re.compile(r'"kind": "([a-z-]+)"')
    return {k for f in WRITERS for k in literal.findall(f.read_text())}


def test_every_record_kind_the_daemon_writes_is_documented_and_no_other() -> None:
    assert _documented() == {str(k) for k in ActionKind} | _written()


def test_the_comparison_sees_both_action_and_log_kinds() -> None:
    # guard against a vacuous match: both sides are read
    assert {"pin-vcpu", "replicate"} <= _documented()
    assert {"note", "failed", "refusal", "guest-report"} <= _written()


def _documented_refusals() -> set[str]:
    text = (ROOT / "docs/daemon.md").read_text()
    start = text.index("| `refusal` |", text.index("## Decision log"))
    return set(re.findall(r"`([A-Z][A-Z_]+)`", text[start: text.index("\n", start)]))


def _policy_refusals() -> set[str]:
    # the refusal kinds are module constants of the policies: NAME = "NAME_IN_CAPITALS"
    constant = re.compile(r'^[A-Z_]+ = "([A-Z][A-Z_]+)"$', re.MULTILINE)
    policy = ROOT / "hypervisor/unicache/policy"
    return {k for f in policy.rglob("*.py") for k in constant.findall(f.read_text())}


def test_every_refusal_kind_a_policy_logs_is_documented_and_no_other() -> None:
    assert _documented_refusals() == _policy_refusals()
    assert {"SCU_NO_GAIN", "SCU_BOUNDED", "NCC_BOUNDED"} <= _policy_refusals()
