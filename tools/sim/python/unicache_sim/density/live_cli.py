"""The front end of ``unicache density --live``: options in, progress on stderr, the report out.

The host CLI (``unicache.cli.density``) imports this module only when the command runs.
Outputs in ``--out``: ``density-live.json`` (what ``--json`` prints) and the daemon's
decision log (``live-decisions.jsonl``). Exit 0 when the run went through, 1 when the
daemon did not exit 0 or a guest's QEMU was left running, 2 on a user error (raised as
``ConfigError``: the CLI prints it in one line).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from unicache.errors import ConfigError
from unicache.host.qemu import load_image

from unicache_sim.density.experiment import DensityRequest, check_request
from unicache_sim.density.live import LiveReport, LiveRequest, plan_guests, run_live
from unicache_sim.density.live_report import document, note
from unicache_sim.density.mixes import load_mixes
from unicache_sim.density.search import SloCheck
from unicache_sim.density.tenants import Catalogue, Mix, load_catalogue

#: the mix of a live run without --mix: a web tier and a key-value cache
DEFAULT_MIX = Mix("web-kv", (("kv", 1), ("web", 1)))
#: the run's JSON document in --out
LIVE_JSON = "density-live.json"


@dataclass(frozen=True, slots=True)
class LiveOptions:
    """The options of ``unicache density --live``.

    :param model: the model of the simulator's prediction.
    :param mix: a mix file of one mix, or ``None`` (:data:`DEFAULT_MIX`).
    :param guests: guests to boot.
    :param vcpus: vCPUs per guest, at most.
    :param seconds: the measured window of each run.
    :param policies: comma-separated policies.
    :param json_out: print JSON instead of the tables.
    :param out: output directory.
    :param catalogue: a catalogue file, or ``None`` (the shipped one).
    :param overcommit: vCPUs per CPU the prediction's model admits.
    :param argv: the command line, for the report.
    """

    model: str
    mix: Path | None = None
    guests: int = 2
    vcpus: int = 1
    seconds: float = 10.0
    policies: str = "linux,unicache"
    json_out: bool = False
    out: Path = Path("build/density")
    catalogue: Path | None = None
    overcommit: float = 4.0
    argv: str = ""
    always_place: bool = False


def build_live_request(opts: LiveOptions) -> LiveRequest:
    """Check the options and build the run (nothing started yet).

    :raises ConfigError: one line naming the problem (a catalogue or mix file with
        problems: :class:`~unicache_sim.density.tenants.CatalogueError`, one line each).
    """
    catalogue: Catalogue = load_catalogue(opts.catalogue)
    mix = DEFAULT_MIX
    if opts.mix is not None:
        mixes = load_mixes(opts.mix, catalogue)
        if len(mixes) > 1:
            raise ConfigError(f"--live runs one mix; {opts.mix} has {len(mixes)}")
        mix = mixes[0]
    policies = tuple(p.strip() for p in opts.policies.split(",") if p.strip())
    # the model and the overcommit, as the simulated experiment checks them
    check_request(DensityRequest(opts.model, catalogue, (mix,), ("linux",), 1,
                                 opts.overcommit))
    return LiveRequest(opts.model, catalogue, mix, opts.guests, opts.vcpus, opts.seconds,
                       policies, out=opts.out, overcommit=opts.overcommit,
                       always_place=opts.always_place)


def run_live_command(opts: LiveOptions) -> int:
    """Run ``unicache density --live`` and print its report; returns the exit code.

    :raises ConfigError: on a user error (the CLI prints it, exit 2).
    """
    req = build_live_request(opts)
    plan_guests(req)  # every size checked before anything boots
    load_image(req.image_dir)  # no image: one line naming `make image`
    try:
        opts.out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot write --out {opts.out}") from err
    err_console = Console(stderr=True)
    progress = Progress(SpinnerColumn(), TextColumn("density --live"), TimeElapsedColumn(),
                        TextColumn("{task.description}"), console=err_console)
    task = progress.add_task("", total=None)

    def say(line: str) -> None:
        progress.update(task, description=line)
        progress.console.print(f"[dim]{line}[/dim]", highlight=False)

    with progress:
        report = run_live(req, say)
    doc = document(report, opts.argv)
    try:
        (opts.out / LIVE_JSON).write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as error:
        raise ConfigError(f"cannot write the results into {opts.out}") from error
    if opts.json_out:
        sys.stdout.write(json.dumps(doc) + "\n")
    else:
        _print(report, opts.out)
    problems = []
    if report.daemon is not None and report.daemon.exit_code != 0:
        problems.append(f"the daemon exited {report.daemon.exit_code} on SIGTERM, not 0")
    if report.left:
        problems.append(f"QEMU of {', '.join(report.left)} was still running after the stop")
    for line in problems:
        sys.stderr.write(f"unicache: error: {line}\n")
    return 1 if problems else 0


def _us(value: float) -> str:
    return f"{value:.0f}" if math.isfinite(value) else "-"


def _met(check: SloCheck | None) -> str:
    if check is None:
        return "-"
    return f"{'yes' if check.meets else 'NO'} ({check.ratio:.2f}x)"


def _print(report: LiveReport, out: Path) -> None:
    req = report.request
    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=(
        f"measured on this host: {len(report.guests)} guests of mix {req.mix.name} "
        f"({req.mix.label}), {req.seconds:g} s per policy; latencies in us, in the guests"))
    for column in ("policy", "guest", "flavor", "requests", "req/s", "p50", "p95", "p99",
                   "SLO: p95 <=", "SLO met?"):
        table.add_column(column, justify="left" if column in ("policy", "guest", "flavor")
                         else "right")
    for r in report.results:
        m = r.measure
        table.add_row(r.policy, r.guest, r.flavor, str(m.requests), f"{m.per_s:.0f}",
                      _us(m.p50_us), _us(m.p95_us), _us(m.p99_us),
                      _us(r.check.target) if r.check else "-", _met(r.check))
    console.print(table)
    refs = ", ".join(f"{r.flavor} p95 {r.p95_us:.0f} us at {r.rate_hz:.0f} req/s per vCPU "
                     f"(service {r.service_us:.0f} us)" for r in report.references)
    console.print(f"alone in its guest (linux, the others idle): {refs}", highlight=False)
    if report.daemon is not None:
        d = report.daemon
        seen = "; ".join(f"{v.vm}: {v.reports} reports ({v.bytes_read / 1e6:.1f} MB read "
                         f"through the shim), placement tables: {v.tables}" for v in d.vms)
        kinds = ", ".join(f"{k} x{n}" for k, n in d.actions) or "none"
        console.print(f"daemon ({d.command}): exit {d.exit_code}; "
                      f"it saw {seen}; other records: {kinds}", highlight=False)
    p = report.prediction
    sim = Table(title=f"{p.label}: the first {p.n} VMs of the mix at the catalogue's sizes; "
                      "latencies in us, simulated")
    for column in ("policy", "flavor", "requests", "p50", "p95", "p99", "SLO: p95 <=",
                   "SLO met?"):
        sim.add_column(column, justify="left" if column in ("policy", "flavor") else "right")
    for pol in p.policies:
        if not pol.admitted:
            sim.add_row(pol.policy, "(not admitted)", *["-"] * 6)
        for t in pol.tenants:
            check = pol.check(t.flavor)
            sim.add_row(pol.policy, t.flavor, str(t.requests), _us(t.p50_us), _us(t.p95_us),
                        _us(t.p99_us), _us(check.target) if check else "-", _met(check))
    console.print(sim)
    console.print(note(report), highlight=False)
    log = f", {report.daemon.log.name}" if report.daemon is not None else ""
    console.print(f"{len(report.guests)} guests stopped, "
                  f"{'none' if not report.left else ', '.join(report.left)} left running; "
                  f"{report.seconds:.0f} s; results in {out}/ ({LIVE_JSON}{log})",
                  highlight=False)
