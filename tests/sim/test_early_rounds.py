"""The simulator's live loop runs the product's early rounds: the agent's early-report rule
(mirrored in unicache_sim.guest.earlyreport, checked here against unicache_agent.early on the
same sequences) and the daemon's RoundTrigger (the same class), with the product's
constants."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import pytest
from unicache.model import ChunkId
from unicache.roundpace import EARLY_ROUND_MIN_S, RoundTrigger
from unicache_sim.engine.config import from_topology
from unicache_sim.experiments.mfc import read as mfc_read
from unicache_sim.experiments.mfc.baselines import UnicacheLive
from unicache_sim.experiments.mfc.read import run_baseline
from unicache_sim.experiments.mfc.spec import MfcSpec
from unicache_sim.guest import earlyreport
from unicache_sim.guest.livetiming import LoopTiming

from tests.topologies import TOPO_OPTERON_16


def _agent_rule() -> Any:
    """unicache_agent.early (the guest agent is imported from guest-agent/, which importing
    tests.agent puts on the path first)."""
    import importlib

    import tests.agent  # noqa: F401

    return importlib.import_module("unicache_agent.early")


def test_the_constants_are_the_products() -> None:
    agent_early = _agent_rule()
    timing = LoopTiming.daemon_defaults()
    assert timing.early_round_s == EARLY_ROUND_MIN_S
    assert timing.early_report_s == earlyreport.EARLY_REPORT_MIN_S
    assert earlyreport.EARLY_REPORT_MIN_S == agent_early.EARLY_REPORT_MIN_S
    assert earlyreport.MAX_KNOWN_CHUNKS == agent_early.MAX_KNOWN_CHUNKS


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_mirror_decides_as_the_agent(seed: int) -> None:
    rng = random.Random(seed)
    agent = _agent_rule().EarlyReports(max_known=12)
    sim = earlyreport.EarlyReports(max_known=12)
    now = 0.0
    for step in range(2000):
        now += rng.choice((0.0, 0.01, 0.05, 0.2))
        keys = {(rng.randrange(4), rng.randrange(5)) for _ in range(rng.randrange(4))}
        ids = {ChunkId(f, c) for f, c in keys}
        what = rng.random()
        if what < 0.1:
            agent.table(step, keys)
            sim.table(step, ids)
        elif what < 0.3:
            agent.reported(keys, now)
            sim.reported(ids, now)
        else:
            assert agent.saw(keys) == sim.saw(ids), step
        assert agent.due_at() == sim.due_at()
        assert {ChunkId(f, c) for f, c in agent.known} == sim.known


def _live_run(monkeypatch: pytest.MonkeyPatch, spec: MfcSpec) -> UnicacheLive:
    made: list[UnicacheLive] = []

    class Kept(UnicacheLive):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(mfc_read, "UnicacheLive", Kept)
    cfg = from_topology(TOPO_OPTERON_16, spec.dram_bw_scale)
    run_baseline("unicache", TOPO_OPTERON_16, cfg, spec, 8 << 20)
    (live,) = made
    return live


def test_whole_intervals_start_with_early_rounds_and_steady_reading_has_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = MfcSpec(seed=1, timing=LoopTiming.daemon_defaults(window_passes=math.inf))
    live = _live_run(monkeypatch, spec)
    assert isinstance(live.trigger, RoundTrigger)
    assert live.trigger.min_gap_s == EARLY_ROUND_MIN_S
    # the guest reads its files for the first time: the rounds follow within 0.1 s each,
    # not at the 1 s interval; once every chunk has a decision, only periodic rounds
    assert 1 <= live.early_rounds <= 10
    assert live.rounds - live.early_rounds >= 3


def test_sampled_intervals_run_the_same_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    live = _live_run(monkeypatch, replace(MfcSpec(seed=2)))
    assert isinstance(live.trigger, RoundTrigger)
    # a sampled window (10 ms of reading) stands for a whole interval: only the first read,
    # before any round, comes early
    assert live.early_rounds <= 2 and live.rounds > live.early_rounds
