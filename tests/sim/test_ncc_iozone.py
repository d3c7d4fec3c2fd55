"""The NCC iozone experiment: replicas emerge from the product's round, writes invalidate
them, memory pressure shrinks them, and the CLI reports every test."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner
from unicache.policy.ncc.cache import RULE_RECLAIM, RULE_WRITE
from unicache.topology.toml import load_model
from unicache_sim.cli.main import app
from unicache_sim.experiments.ncc import iozone_guest as ncc_iozone_guest
from unicache_sim.experiments.ncc.iozone import IozoneSpec, run_config, run_iozone

TOPO = load_model("opteron-242-2node")
#: 4 MiB files on 32 MiB nodes, rounds every 3 ms simulated: quick, and replicas are made
#: where NCC does not step aside (the mechanism tests: the daemon's --always-place)
SMALL = IozoneSpec(scale=32, round_s=0.1, step_aside=False)


def test_a_write_drops_replicas_and_no_read_is_ever_served_from_an_older_fill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = {"now": 0}
    last_write: dict[int, int] = {}
    filled: dict[tuple[int, int, int], int] = {}
    served = []
    guest = ncc_iozone_guest.GuestCache
    count_write, fill, replica_for = guest.count_write, guest.fill, guest.replica_for

    def on_write(self: ncc_iozone_guest.GuestCache, f: int, offset: int) -> None:
        clock["now"] += 1
        last_write[f] = clock["now"]
        count_write(self, f, offset)

    def on_fill(self: ncc_iozone_guest.GuestCache, f: int, index: int, node: int) -> int:
        clock["now"] += 1
        filled[(f, index, node)] = clock["now"]
        return fill(self, f, index, node)

    def on_serve(
        self: ncc_iozone_guest.GuestCache, f: int, index: int, node: int
    ) -> ncc_iozone_guest.Replica | None:
        replica = replica_for(self, f, index, node)
        if replica is not None:
            served.append(filled[(f, index, node)] > last_write.get(f, 0))
        return replica

    monkeypatch.setattr(guest, "count_write", on_write)
    monkeypatch.setattr(guest, "fill", on_fill)
    monkeypatch.setattr(guest, "replica_for", on_serve)
    spec = IozoneSpec(
        threads=4, scale=32, round_s=0.05, seed=2, step_aside=False,
        phases=("write", "read", "re-read", "backward read", "re-write", "read", "re-read"),
    )
    run = run_config(TOPO, spec, replicas=True)
    assert run.fills > 0 and served
    assert run.drops.get(RULE_WRITE, 0) > 0  # the host dropped what the re-write changed
    assert all(served)  # every serve came from a fill newer than its file's last write


def test_replicas_raise_local_hits_of_backward_and_stride_reads() -> None:
    for seed in (1, 2, 3):
        result = run_iozone(TOPO, replace(SMALL, threads=4, seed=seed))
        for phase in ("backward read", "stride read"):
            before = result.without.phase(phase).local_ratio
            after = result.with_replicas.phase(phase).local_ratio
            assert after >= before
        # the same scheduler draws in both runs: writes are never served by replicas
        for phase in ("write", "re-write"):
            assert result.with_replicas.phase(phase).local_ratio == pytest.approx(
                result.without.phase(phase).local_ratio
            )
    assert any(
        result.with_replicas.phase(p).local_ratio > result.without.phase(p).local_ratio
        for p in ("backward read", "stride read")
    )


def test_ncc_steps_aside_where_its_replicas_would_churn_and_is_never_slower() -> None:
    # the paper's NCC (no step-aside) loses on stride reads: whole-chunk fills that MQ
    # evicts before a later read; the product's step-aside makes fewer and loses nothing
    paper_worst = 1.0
    for seed in (1, 2):
        spec = replace(SMALL, threads=6, seed=seed)
        off = run_config(TOPO, spec, replicas=False)
        paper = run_config(TOPO, spec, replicas=True)
        product = run_config(TOPO, replace(spec, step_aside=True), replicas=True)
        assert paper.aside_rounds == 0 and paper.replicated > 0
        assert product.aside_rounds > 0 and product.replicated < paper.replicated
        for o, p, q in zip(off.phases, product.phases, paper.phases, strict=True):
            assert o.seconds / p.seconds >= 0.98, (seed, o.phase)
            paper_worst = min(paper_worst, o.seconds / q.seconds)
    assert paper_worst < 0.98  # what the rule is for


def test_a_memory_tight_node_shrinks_its_replicas_two_to_one() -> None:
    # the system holds 36 % of a node: 8 files of 128 MB leave a node 14 % free, so the
    # replicas (up to the 10 % budget) push it under the 10 % floor
    spec = IozoneSpec(threads=8, scale=32, round_s=0.05, system_mb=368.0, step_aside=False)
    tight = run_config(TOPO, spec, replicas=True)
    assert tight.tight_rounds > 0
    assert tight.drops.get(RULE_RECLAIM, 0) > 0  # the host's round gave replicas back
    assert tight.replica_peak_bytes <= tight.replica_budget_bytes
    roomy = run_config(TOPO, replace(spec, system_mb=0.0), replicas=True)
    assert roomy.tight_rounds == 0 and RULE_RECLAIM not in roomy.drops
    assert roomy.replicated > 0


def test_the_cli_reports_every_test_and_refuses_a_bad_case() -> None:
    runner = CliRunner()
    out = runner.invoke(
        app, ["ncc", "--case", "iozone", "--threads", "2", "--seeds", "1", "--scale", "64",
              "--json"],
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert [t["phase"] for t in doc["tests"]] == [
        "write", "re-write", "read", "re-read", "backward read", "stride read"
    ]
    assert runner.invoke(app, ["ncc", "--case", "nope"]).exit_code == 2
    assert runner.invoke(app, ["ncc", "--case", "iozone", "--threads", "0"]).exit_code == 2
