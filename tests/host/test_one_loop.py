"""One loop (issue #14): the daemon, ``unicache replay`` and the simulator's live path all
run their rounds through ``unicache.loop.run_rounds``, and the loop keeps a round's order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from unicache import daemon as daemon_module
from unicache import loop
from unicache.cli import app
from unicache.config import DaemonConfig
from unicache.daemon import run_daemon
from unicache.host.ports import ActResult
from unicache.host.procfs_source import ProcessVmSource
from unicache.model import Action, Decision, Observation
from unicache.policy.round import RoundState
from unicache.topology import Unify
from unicache_sim.engine.config import from_topology
from unicache_sim.experiments.mfc.read import run_baseline
from unicache_sim.experiments.mfc.spec import MIB, MfcSpec

from tests.host.test_daemon import guest  # noqa: F401  (the stand-in QEMU fixture)
from tests.topologies import TOPO_OPTERON_16

ROOT = Path(__file__).resolve().parents[2]


def _spy(monkeypatch: pytest.MonkeyPatch, *modules: Any) -> list[int]:
    """Count the rounds ``run_rounds`` yields, wherever it was imported."""
    yielded: list[int] = []
    real = loop.run_rounds

    async def counting(*args: Any, **kwargs: Any) -> AsyncGenerator[loop.RoundResult, None]:
        async for rnd in real(*args, **kwargs):
            yielded.append(rnd.tick)
            yield rnd

    for module in (loop, *modules):
        monkeypatch.setattr(module, "run_rounds", counting)
    return yielded


def test_replay_runs_its_rounds_through_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    yielded = _spy(monkeypatch)
    trace = ROOT / "examples" / "opteron16-uniform.jsonl"
    result = CliRunner().invoke(app, ["replay", "--model", "opteron-16", "--trace", str(trace),
                                      "--json"])
    assert result.exit_code == 0, result.output
    assert len(yielded) >= 2


def test_the_simulators_live_path_runs_its_rounds_through_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    yielded = _spy(monkeypatch)
    topo = TOPO_OPTERON_16
    run_baseline("unicache", topo, from_topology(topo), MfcSpec(), 2 * MIB)
    assert len(yielded) >= 8  # WARM_ROUNDS at least


def test_the_daemon_runs_its_rounds_through_the_loop(
    tmp_path: Path, guest: int, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    yielded = _spy(monkeypatch, daemon_module)
    config = DaemonConfig(interval_s=0.05, unify=Unify.L2, state_dir=tmp_path, rounds=3)
    assert asyncio.run(run_daemon(config, ProcessVmSource([("vm1", guest, None)]))) == 0
    assert len(yielded) == 3


class _Recorder:
    """A host that records the order of the loop's calls."""

    def __init__(self, observations: int) -> None:
        self.calls: list[str] = []
        self.left = observations

    def observe(self) -> Observation | None:
        self.calls.append("observe")
        if not self.left:
            return None
        self.left -= 1
        return Observation(self.left, (), (), ())

    def act(self, actions: Sequence[Action]) -> ActResult:
        self.calls.append("act")
        return ActResult(tuple(actions))


class _WaitingRecorder(_Recorder):
    """The same host observing as the daemon's does, in a coroutine."""

    async def observe(self) -> Observation | None:  # type: ignore[override]
        return super().observe()


class _Policy:
    name = "recorder"

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def start(self, state: RoundState) -> None:
        self.calls.append("start")

    def decide(self, obs: Observation, state: RoundState) -> tuple[Decision, RoundState]:
        self.calls.append("decide")
        return Decision("recorder", ()), state


def test_a_round_observes_decides_then_acts_until_the_host_has_nothing_more() -> None:
    host = _Recorder(2)
    rounds = list(loop.run_rounds_sync(host, _Policy(host.calls), RoundState()))
    assert len(rounds) == 2
    assert host.calls == ["start", *["observe", "decide", "act"] * 2, "observe"]


def test_a_decide_stopped_midway_ends_the_loop_without_acting() -> None:
    host = _WaitingRecorder(5)

    async def stopped(obs: Observation, state: RoundState) -> None:
        return None

    async def drive() -> list[loop.RoundResult]:
        return [r async for r in loop.run_rounds(host, _Policy(host.calls), RoundState(),
                                                 decide=stopped)]

    assert asyncio.run(drive()) == []
    assert host.calls == ["start", "observe"]
