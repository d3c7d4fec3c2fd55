"""A late policy round in the real daemon loop: its actions are dropped and the log says why.

The daemon runs in this process (``run_daemon``) on a stand-in QEMU whose two vCPUs it
would pin; the policy's first round is made slower than the deadline. That round's pins
are dropped (the host it observed has moved on), the next round's are applied.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from unicache import daemon as daemon_module
from unicache.config import DaemonConfig
from unicache.daemon import run_daemon
from unicache.host.procfs_source import ProcessVmSource
from unicache.policy.round import UnicachePolicy
from unicache.topology import Unify

from tests.host.test_daemon import guest  # noqa: F401  (the stand-in QEMU fixture)


def test_a_round_past_its_deadline_has_its_actions_dropped_and_logged(
    tmp_path: Path, guest: int, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setattr(daemon_module, "ROUND_DEADLINE_MIN_S", 0.3)
    monkeypatch.setattr(daemon_module, "ROUND_DEADLINE_INTERVALS", 1)
    decide = UnicachePolicy.decide
    calls = []

    def slow_first(self: UnicachePolicy, obs: Any, state: Any) -> Any:
        calls.append(obs.tick)
        if len(calls) == 1:
            time.sleep(0.6)  # twice the deadline
        return decide(self, obs, state)

    monkeypatch.setattr(UnicachePolicy, "decide", slow_first)
    config = DaemonConfig(interval_s=0.1, unify=Unify("l2"), state_dir=tmp_path, rounds=3,
                          always_place=True)  # OBS pins the weightless vCPUs too
    assert asyncio.run(run_daemon(config, ProcessVmSource([("vm1", guest, None)]))) == 0
    records = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    late = [r for r in records if r["kind"] == "note" and "deadline" in r["message"]]
    assert len(late) == 1, late
    late_tick = calls[0]
    assert f"round {late_tick} took" in late[0]["message"]
    assert "actions are dropped" in late[0]["message"]
    assert "its 0 actions" not in late[0]["message"]  # it had pins to drop
    pins = [r for r in records if r["kind"] == "pin-vcpu"]
    assert pins and all(r["tick"] != late_tick for r in pins)  # later rounds pin
