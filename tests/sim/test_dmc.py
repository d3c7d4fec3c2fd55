"""The DMC what-if: the coherence the microbenchmarks rely on, the properties of cpush,
cllookup and cmsg on the simulator's caches, the cost scaling per model, and that the
what-if is never the default."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from typer.testing import CliRunner
from unicache.topology.toml import load_model
from unicache_sim.cli.main import app
from unicache_sim.experiments.dmc.costs import PAPER_COSTS, c2c_cycles, dmc_costs_for, paper_config
from unicache_sim.experiments.dmc.isa import NOBODY, Core, DmcMachine
from unicache_sim.experiments.dmc.micro import linked_list, pingpong, scan
from unicache_sim.experiments.dmc.whatif import dmc_migration_cycles, dmc_topology
from unicache_sim.experiments.mfc.spec import MfcSpec

MODELS = ("opteron-16", "epyc-2s", "epyc-rome-2s", "xeon-spr-2s", "xeon-spr-2s-snc4")


def _machine() -> DmcMachine:
    return DmcMachine(paper_config(), PAPER_COSTS)


def test_a_store_invalidates_the_other_copy_and_the_reader_pays_a_coherence_miss() -> None:
    m = _machine()
    a, b = m.cores
    data = m.alloc(4)
    a.store(data, 0)
    assert b.load(data, 0) == PAPER_COSTS.coherence_miss  # recalled from a's L1
    assert b.load(data, 0) == PAPER_COSTS.l1_hit
    # a's copy is shared now: its store waits for b's copy to go
    assert a.store(data, 0) == PAPER_COSTS.l1_hit + PAPER_COSTS.coherence_miss
    assert not b.holds(data, 0)
    assert a.store(data, 0) == PAPER_COSTS.l1_hit  # alone: silent


def test_cpush_moves_a_modified_line_and_copies_a_shared_one() -> None:
    m = _machine()
    a, b = m.cores
    data = m.alloc(4)
    a.store(data, 0)
    a.cpush(data, [0], b.cpu)
    assert b.holds(data, 0) and not a.holds(data, 0)
    assert b.load(data, 0) == PAPER_COSTS.l1_hit
    a.load(data, 1)
    b.load(data, 1)  # shared by both
    a.cpush(data, [1], b.cpu)
    assert a.holds(data, 1) and b.holds(data, 1)
    # a line a does not hold: ignored, one cycle
    assert a.cpush(data, [2], b.cpu) == PAPER_COSTS.push_issue and not b.holds(data, 2)


def test_cpush_stalls_the_pusher_once_the_fifo_is_full() -> None:
    m = _machine()
    a, b = m.cores
    data = m.alloc(10)
    for line in range(10):
        a.store(data, line)
    cost = a.cpush(data, list(range(10)), b.cpu)
    fifo = PAPER_COSTS.push_fifo
    assert cost == fifo * PAPER_COSTS.push_issue + (10 - fifo) * PAPER_COSTS.push_transfer


def test_cllookup_finds_the_holder_or_nobody() -> None:
    m = _machine()
    a, b = m.cores
    data = m.alloc(2)
    assert b.cllookup(data, 0) == (NOBODY, PAPER_COSTS.lookup)
    a.store(data, 0)
    assert b.cllookup(data, 0) == (a.cpu, PAPER_COSTS.lookup)
    assert a.cllookup(data, 0) == (a.cpu, PAPER_COSTS.l1_hit)


def test_cmsg_runs_the_handler_where_the_line_is() -> None:
    m = _machine()
    a, b = m.cores
    data = m.alloc(2)
    a.store(data, 0)
    ran_on: list[int] = []

    def handler(core: Core) -> float:
        ran_on.append(core.cpu)
        return 0.0

    delivered, _ = b.cmsg(data, 0, handler)
    assert delivered and ran_on == [a.cpu]
    delivered, cycles = a.cmsg(data, 0, lambda core: 0.0)
    assert not delivered and cycles == PAPER_COSTS.l1_hit


def test_cpush_makes_the_ping_pong_cheaper_than_plain_coherence_misses() -> None:
    trips = [pingpong(k) for k in range(7)]
    assert all(later < earlier for earlier, later in itertools.pairwise(trips))
    # on each leg a pushed line turns the destination's miss into a hit and spares the
    # next save its upgrade, for the price of its push
    c = PAPER_COSTS
    per_line = 2 * ((c.coherence_miss - c.l1_hit) + c.coherence_miss - c.push_issue)
    assert trips[0] - trips[1] == pytest.approx(per_line)


def test_cmsg_pays_off_as_segments_and_extra_lines_grow() -> None:
    gains = [scan(n).faster for n in (1, 2, 8)]
    assert gains[0] < 0 < gains[1] < gains[2]  # a lookup and two messages cost more than one miss
    lw1, cm1 = linked_list(1, False, seed=3, ops=300), linked_list(1, True, seed=3, ops=300)
    lw4, cm4 = linked_list(4, False, seed=3, ops=300), linked_list(4, True, seed=3, ops=300)
    assert cm1 < lw1 and (lw4 - lw1) > (cm4 - cm1)


@pytest.mark.parametrize("model", MODELS)
def test_costs_scale_with_each_models_cache_to_cache_latency(model: str) -> None:
    topo = load_model(model)
    same, cross = c2c_cycles(topo)
    remote = dmc_costs_for(topo, remote=True)
    assert remote.coherence_miss == cross
    assert remote.lookup / PAPER_COSTS.lookup == pytest.approx(cross / PAPER_COSTS.coherence_miss)
    assert remote.push_issue == PAPER_COSTS.push_issue  # issuing stays one cycle
    assert dmc_costs_for(topo, remote=False).coherence_miss == same
    own = float(topo.migration_cycles_remote or topo.migration_cycles or 0)
    push = dmc_migration_cycles(topo, "push", remote=True)
    handoff = dmc_migration_cycles(topo, "handoff", remote=True)
    assert handoff < push <= own + 64
    # a hand-off across groups costs more on a machine whose lines travel further
    assert handoff > dmc_migration_cycles(topo, "handoff", remote=False)


def test_the_what_if_is_labelled_and_never_the_default() -> None:
    spec = MfcSpec()
    assert spec.dmc_migration == "none" and spec.dmc_lookup is False
    topo = load_model("opteron-16")
    assert dmc_topology(topo, "none") is topo
    whatif = dmc_topology(topo, "handoff")
    assert whatif.name == "opteron-16+dmc-handoff" and "WHAT-IF" in whatif.source
    assert (whatif.migration_cycles_remote or 0) < (topo.migration_cycles_remote or math.inf)


def test_cli_dmc_json_and_a_bad_option() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["dmc", "--scu", "", "--seeds", "1", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [p["lines"] for p in doc["scan"]] == [1, 2, 4, 8]
    assert doc["scu"] == []
    bad = runner.invoke(app, ["dmc", "--scu", "opteron-16:x"])
    assert bad.exit_code == 2
