"""``unicache-sim ncc --case iozone``: the NCC paper's iozone tests (Tables 3-5, Figure 4),
run by :mod:`.colors_replicas`."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from unicache.errors import UnicacheError
from unicache.topology import Topology
from unicache.topology.toml import load_model

from unicache_sim.cli.common import parse_seeds, user_error
from unicache_sim.cli.output import emit_json, progress_steps

if TYPE_CHECKING:
    from unicache_sim.experiments.ncc.iozone import IozoneResult, IozoneSpec
    from unicache_sim.experiments.ncc.iozone_summary import PhaseSummary


def _parse_threads(text: str) -> tuple[int, ...]:
    try:
        threads = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as err:
        raise UnicacheError(f"--threads wants comma-separated counts, not {text!r}") from err
    if not threads or any(t < 1 or t > 64 for t in threads):
        raise UnicacheError("--threads needs counts from 1 to 64")
    return threads


def ncc_iozone(
    model: str,
    threads: str,
    seeds: str,
    round_s: float,
    system_mb: float,
    scale: int,
    as_json: bool,
    always_place: bool = False,
) -> None:
    """Run iozone at each thread count and seed, without and with the product's NCC, and
    print per test the throughput, speedup and local page hits (median, range over seeds).

    :param model: the machine.
    :param threads: thread counts, comma-separated.
    :param seeds: the seed list (``parse_seeds``).
    :param round_s: the daemon's round, seconds at the paper's scale.
    :param system_mb: a node's memory the system holds, MiB at the paper's scale.
    :param scale: sizes (and the round) divided by this.
    :param as_json: print JSON instead of a table.
    :param always_place: NCC never steps aside (the daemon's ``--always-place``).
    """
    from unicache_sim.experiments.ncc.iozone import IozoneSpec
    from unicache_sim.experiments.ncc.iozone_summary import summarize

    try:
        counts = _parse_threads(threads)
        seed_list = parse_seeds(seeds)
        topo = load_model(model)
        base = IozoneSpec(
            round_s=round_s, system_mb=system_mb, scale=scale, step_aside=not always_place
        )
        base.check()
        results = _run_all(topo, base, counts, seed_list)
    except UnicacheError as err:
        user_error(err)
        return
    rows = summarize(results)
    if as_json:
        doc = {"model": model, "spec": asdict(base), "seeds": list(seed_list)}
        emit_json({**doc, "tests": _tests_json(rows), "runs": _runs_json(results, seed_list)})
        return
    _print_iozone(model, seeds, rows, results, seed_list)


def _run_all(
    topo: Topology, base: IozoneSpec, counts: tuple[int, ...], seed_list: tuple[int, ...]
) -> dict[int, list[IozoneResult]]:
    """Every thread count and seed, without and then with replicas, under a progress bar.

    :returns: per thread count, one result per seed in ``seed_list``'s order.
    """
    from unicache_sim.experiments.ncc.iozone import IozoneResult, run_config

    results: dict[int, list[IozoneResult]] = {}
    with progress_steps(2 * len(counts) * len(seed_list)) as step:
        for t in counts:
            for seed in seed_list:
                spec = replace(base, threads=t, seed=seed)
                runs = []
                for replicas in (False, True):
                    runs.append(run_config(topo, spec, replicas))
                    step(f"{t} threads, seed {seed}, replicas {'on' if replicas else 'off'}")
                results.setdefault(t, []).append(IozoneResult(runs[0], runs[1]))
    return results


def _tests_json(rows: list[PhaseSummary]) -> list[dict[str, object]]:
    """Per thread count and test, the medians and ranges over seeds."""
    fields = ("mb_s_without", "mb_s_with", "speedup_pct", "local_without", "local_with")
    return [
        {
            "threads": r.threads,
            "phase": r.phase,
            **{name: asdict(getattr(r, name)) for name in fields},
        }
        for r in rows
    ]


def _runs_json(
    results: dict[int, list[IozoneResult]], seed_list: tuple[int, ...]
) -> list[dict[str, object]]:
    """Every run, raw, by thread count and seed."""
    return [
        {
            "threads": t,
            "seed": s,
            "without": asdict(r.without),
            "with": asdict(r.with_replicas),
        }
        for t, rs in sorted(results.items())
        for s, r in zip(seed_list, rs, strict=True)
    ]


def _print_iozone(
    model: str,
    seeds: str,
    rows: list[PhaseSummary],
    results: dict[int, list[IozoneResult]],
    seed_list: tuple[int, ...],
) -> None:
    """The per-test table, then what the daemon and the agent did on the first seed."""
    table = Table(
        title=f"NCC §5 iozone on {model}: MiB/s and local page hits, off -> on "
        f"(median, range over seeds {seeds})",
        caption="paper: Tables 3-5 (speedup up to +14.3% for stride read), Figure 4",
    )
    for col in ("threads", "test", "MiB/s off", "MiB/s on", "speedup", "local % off", "local % on"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r.threads),
            r.phase,
            r.mb_s_without.text("{:.0f}"),
            r.mb_s_with.text("{:.0f}"),
            r.speedup_pct.text("{:+.1f}", "%"),
            r.local_without.text("{:.1f}"),
            r.local_with.text("{:.1f}"),
        )
    Console().print(table)
    for t, rs in sorted(results.items()):
        on = rs[0].with_replicas
        drops = ", ".join(f"{k}: {v}" for k, v in on.drops.items()) or "none"
        Console().print(
            f"{t} threads (seed {seed_list[0]}): {on.rounds} rounds, {on.tight_rounds} "
            f"memory-tight, {on.replicated} replicas decided, {on.fills} filled, drops {drops}"
        )
