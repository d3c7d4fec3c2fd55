"""``unicache bench``: benchmarks of unicache's components (mounted by the main CLI).

Every benchmark is in the package (:mod:`unicache.bench`) and runs wherever unicache is
installed, given what it measures: the shim's a shim (the checkout's or an installed
agent's), the live daemon's and the ordinary programs' a guest image (``make image``, or
``UNICACHE_IMAGE_DIR``), the live daemon's the simulator's package too (its guests and
daemon driver, :mod:`unicache_sim.density`). Whatever is missing is one line, exit 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from unicache.errors import BenchError, UnicacheError

if TYPE_CHECKING:
    from unicache.bench.shim import ShimBenchResult

app = typer.Typer(help="Benchmarks of unicache's own components.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
_err = Console(stderr=True)
#: every benchmark's --json
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _fail(command: str, err: UnicacheError) -> NoReturn:
    """One line for the user, exit 2."""
    _err.print(f"unicache bench {command}: {err}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2) from err


@app.callback()
def _group() -> None:
    """Benchmarks of unicache's own components."""


def _no_simulator(err: ModuleNotFoundError) -> BenchError:
    """The one line for a benchmark whose import found no simulator's package (``err``
    itself, raised again, when what is missing is something else)."""
    if err.name is None or err.name.split(".")[0] != "unicache_sim":
        raise err
    return BenchError("the live bench drives its guests and daemon with the simulator's "
                      "package, which is not installed (make sim-build; the host package "
                      "has it)")


def _ci(mid: float, low: float, high: float) -> str:
    return f"{mid:+.1f} [{low:+.1f}, {high:+.1f}]"


@app.command("shim")
def shim(
    sizes: Annotated[str | None, typer.Option(
        help="Bytes per call, separated by commas [default: 512,4096,16384,65536,262144].")
    ] = None,
    kinds: Annotated[str | None, typer.Option(
        help="Calls, of read,pread,readv,fread [default: all].")] = None,
    patterns: Annotated[str | None, typer.Option(
        help="seq (through a 16 MiB cached file) and/or reread (its first bytes again) "
             "[default: both].")] = None,
    tables: Annotated[str | None, typer.Option(
        help="Table states, of placed,unplaced,none [default: all].")] = None,
    file_sizes: Annotated[str | None, typer.Option(
        help="Sizes of the files cells' small files, separated by commas, or none: per "
             "file an open, fstat, read to EOF and close (what tar pays the shim per "
             "file), under the unplaced table with each open sample: the agent's, every "
             "open counted, practically none [default: 4096,16384,65536; --quick "
             "16384].")] = None,
    seconds: Annotated[float | None, typer.Option(
        help="Seconds per cell, process and round [default: 0.15; --quick 0.05].")] = None,
    rounds: Annotated[int | None, typer.Option(
        help="Rounds: processes per cell under the shim and under the control, "
             "alternating; more rounds average out offsets that differ between processes "
             "[default: 9, the fewest whose interval leaves out both extremes; "
             "--quick 1].")] = None,
    quick: Annotated[bool, typer.Option(
        help="A smoke run: 4 KiB and 64 KiB sequential read() under each table, pipes, "
             "sockets, 16 KiB files under each open sample and starts, briefly (options "
             "given still apply).")] = False,
    shim_dir: Annotated[Path | None, typer.Option(
        help="The shim to measure: a directory with libunicache.so, uc_bench, "
             "libuc_null.so, libuc_floor.so and unicache_agent/ [default: the source "
             "checkout's guest-agent/shim, built with make; else the unicache-agent "
             "package's /usr/lib/unicache-agent].")] = None,
    json_out: JsonFlag = False,
) -> None:
    """What a guest's calls pay under libunicache.so: added ns per call, cell by cell.

    Each cell (call kind, size, pattern, table state) runs in one process pinned to one
    CPU, blocks through the preloaded function alternating with blocks through libc's
    own; the figure is the median of the paired differences with its 95 % interval, the
    ratio libc's ns over the preloaded one's, and the control the same cell under a
    preload that does nothing (the method's zero). Then pipes and sockets, small files
    (ns per file), process starts, and the shim's budgets, met or not
    (docs/PERFORMANCE.md).
    """
    from rich.progress import Progress

    try:
        from unicache.bench import shim as bench
        from unicache.bench import shim_cells, shim_files

        matrix = shim_cells.matrix_of(sizes, kinds, patterns, tables, quick)
        files = shim_files.file_sizes_of(file_sizes, quick)
        secs = seconds if seconds is not None else (0.05 if quick else 0.15)
        nrounds = rounds if rounds is not None else (1 if quick else 9)
        with Progress(console=_err, transient=True) as progress:
            task = progress.add_task("shim cells", total=max(
                bench.steps(matrix, nrounds, file_sizes=files), 1))

            def tick(what: str) -> None:
                progress.update(task, advance=1, description=f"shim: {what}")

            res = bench.run_shim_bench(matrix.sizes, matrix.kinds, matrix.patterns,
                                       matrix.tables, seconds=secs, rounds=nrounds,
                                       file_sizes=files, tick=tick, shim_dir=shim_dir)
    except UnicacheError as err:
        _fail("shim", err)
    if json_out:
        sys.stdout.write(json.dumps(res.as_json()) + "\n")
        return
    _print_shim(res)


def _print_shim(res: ShimBenchResult) -> None:
    """The shim bench's tables: the cells, fds and starts; then the budgets."""
    out = Console()
    table = Table(title=f"added cost per call under libunicache.so, CPU {res.cpu}, "
                        f"{res.rounds} x {res.seconds:g} s per cell, "
                        f"{res.table_entries:,}-entry tables")
    for col in ("cell", "added [95 % CI]", "ratio", "control [95 % CI]"):
        table.add_column(col, justify="left" if col == "cell" else "right")
    for c in res.cells:
        s, k = c.shim, c.control
        table.add_row(c.cell.label(), _ci(s.added, s.ci_low, s.ci_high) + " ns",
                      f"{s.ratio:.3f}", _ci(k.added, k.ci_low, k.ci_high) + " ns")
    for f in res.fds:
        s, k = f.shim, f.control
        table.add_row(f"{f.kind} {f.size} B write + read", _ci(s.added, s.ci_low, s.ci_high)
                      + " ns", f"{s.ratio:.3f}", _ci(k.added, k.ci_low, k.ci_high) + " ns")
    for p in res.spawn:
        s, k = p.shim, p.control
        table.add_row(f"{p.kind} start ({' '.join(p.command)})",
                      _ci(s.added, s.ci_low, s.ci_high) + " us", f"{s.ratio:.3f}",
                      _ci(k.added, k.ci_low, k.ci_high) + " us")
    out.print(table)
    if res.files:
        out.print(_files_table(res))
    budgets = Table(title="budgets (upper end of the 95 % interval, sequential calls)")
    for col in ("case", "limit ns", "upper ns", "met", "floor ns [95 % CI]"):
        budgets.add_column(col, justify="left" if col == "case" else "right")
    for b in res.budgets:
        budgets.add_row(b.case, f"{b.limit_ns:g}",
                        "-" if b.upper_ns is None else f"{b.upper_ns:.1f}",
                        "not run" if b.met is None else ("yes" if b.met else "NO"),
                        "-" if b.floor is None else _ci(b.floor[1], b.floor[0], b.floor[2]))
    out.print(budgets)


def _files_table(res: ShimBenchResult) -> Table:
    """The files cells: added ns per file (open, fstat, read to EOF, close), by size and
    open sample."""
    from unicache.bench.shim_cells import size_text

    table = Table(title="added cost per file (open, fstat, read to EOF, close) under the "
                        "unplaced table, by open sample")
    for col in ("files", "open sample", "added [95 % CI]", "ratio", "control [95 % CI]"):
        table.add_column(col, justify="left" if col in ("files", "open sample") else "right")
    for f in res.files:
        s, k = f.shim, f.control
        table.add_row(size_text(f.cell.size), f.cell.sample, _ci(s.added, s.ci_low, s.ci_high)
                      + " ns", f"{s.ratio:.3f}", _ci(k.added, k.ci_low, k.ci_high) + " ns")
    return table


def _sizes(text: str, flag: str) -> list[int]:
    try:
        sizes = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise BenchError(f"{flag} takes whole numbers separated by commas, not {text!r}") from err
    if not sizes:
        raise BenchError(f"{flag} takes at least one size")
    return sizes


@app.command("policy")
def policy(
    vms: Annotated[str, typer.Option(
        help="VMs on the host; several sizes separated by commas (one point each).")] = "1000",
    chunks: Annotated[str, typer.Option(
        help="Chunks SCU tracks, over all VMs; several sizes separated by commas.")] = "1000000",
    rounds: Annotated[int, typer.Option(
        help="Timed rounds per point (after 3 warm-up; at most 240, after which the "
             "seeded chunks would age out).")] = 100,
    changed_fraction: Annotated[float, typer.Option(
        help="Chunk records in one round's reports, as a fraction of --chunks (the load: "
             "docs/PERFORMANCE.md).")] = 0.005,
    zipf_s: Annotated[float, typer.Option(
        help="Zipf exponent of activity across VMs and of chunk popularity in a VM.")] = 1.0,
    vcpus: Annotated[int, typer.Option(help="vCPUs per VM.")] = 2,
    model: Annotated[str, typer.Option(help="Machine model the policy runs for.")] = "epyc-2s",
    seed: Annotated[int, typer.Option(help="Seed of the synthetic load.")] = 1,
    plot: Annotated[Path | None, typer.Option(
        help="Write a PNG of round time against VMs and chunks here.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Time and memory of one policy round (OBS, SRM, NCC, SCU) at fleet scale.

    Feeds the product's round, through the product's loop, a synthetic fleet: every VM
    reports every round, Zipf-popular VMs and chunks, --changed-fraction of the tracked
    chunks read per round. Prints p50/p99 round time, the state's bytes per tracked chunk
    and the peak RSS per point.
    """
    from rich.progress import Progress

    try:
        from unicache.bench import policy as bench
        vm_sizes, chunk_sizes = _sizes(vms, "--vms"), _sizes(chunks, "--chunks")
        total = len(set(vm_sizes)) * len(set(chunk_sizes)) * (rounds + bench.WARMUP_ROUNDS)
        with Progress(console=_err, transient=True) as progress:
            task = progress.add_task("policy rounds", total=max(total, 1))

            def tick(what: str) -> None:
                progress.update(task, advance=1, description=f"policy rounds ({what})")

            res = bench.run_policy_bench(
                vm_sizes, chunk_sizes, rounds=rounds, changed_fraction=changed_fraction,
                zipf_s=zipf_s, vcpus=vcpus, seed=seed, model=model, tick=tick,
            )
        if plot is not None:
            bench.plot(res, plot)
    except UnicacheError as err:
        _fail("policy", err)
    if json_out:
        sys.stdout.write(json.dumps(res.as_json()) + "\n")
        return
    table = Table(title=f"policy round on {res.model} ({res.units} units), changed fraction "
                        f"{changed_fraction:g}, {rounds} timed rounds")
    for col in ("VMs", "chunks", "records/round", "p50 ms", "p99 ms", "CPU p99 ms",
                "B/chunk", "peak RSS MiB", "gc between rounds p50/max ms", "full gc ms"):
        table.add_column(col, justify="right")
    for p in res.points:
        table.add_row(f"{p.vms:,}", f"{p.tracked_chunks:,}", f"{p.records_per_round:,}",
                      f"{p.p50_ms:.1f}", f"{p.p99_ms:.1f}", f"{p.cpu_p99_ms:.1f}",
                      f"{p.bytes_per_chunk:.0f}", f"{p.peak_rss_mib:.0f}",
                      f"{p.gc_p50_ms:.1f}/{p.gc_max_ms:.1f}", f"{p.gc_full_ms:.0f}")
    Console().print(table)


@app.command("live")
def live(
    guests: Annotated[int, typer.Option(help="Busy guests to boot (1-3).")] = 1,
    seconds: Annotated[float, typer.Option(
        help="Seconds of the steady window (the guests' readers busy).")] = 30.0,
    trials: Annotated[int, typer.Option(
        help="Reaction trials per guest (each reads a file nobody read before).")] = 10,
    always_place: Annotated[bool, typer.Option(
        "--always-place/--cost-models",
        help="The daemon with make demo's --unify l2 --always-place (it places and "
             "publishes tables), or as an operator runs it (cost models on: on a host with "
             "one LLC group it leaves the guests alone and no trial sees an entry).")] = True,
    plot: Annotated[Path | None, typer.Option(
        help="Write a PNG of the daemon's CPU and RSS over time here.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Daemon and agent cost, channel traffic and table reaction with real guests.

    Boots guests from the project's image (make image), starts the real daemon at its
    default interval, lets a reader under the shim keep every guest busy for --seconds
    while sampling the daemon's /proc (CPU, RSS), the agents' CPU (in the guests) and the
    channel's bytes (the daemon's metrics); then times --trials reactions: a guest starts
    reading a new hot file, until its shared table holds the file's entry (on the guest's
    clock; the daemon's publish is placed on it with an NTP-style offset). See
    docs/PERFORMANCE.md "Live".
    """
    from rich.progress import Progress

    try:
        try:
            from unicache.bench import live_bench as bench
            from unicache.bench.live_run import run_live_bench  # imports the simulator's package
        except ModuleNotFoundError as err:
            raise _no_simulator(err) from None
        with Progress(console=_err, transient=True) as progress:
            task = progress.add_task("live bench: boot", total=len(bench.STEPS))
            steps = list(bench.STEPS)

            def tick(done: str) -> None:
                nxt = steps[steps.index(done) + 1] if done in steps[:-1] else "done"
                progress.update(task, advance=1, description=f"live bench: {nxt}")

            res = run_live_bench(guests=guests, seconds=seconds, trials=trials,
                                 always_place=always_place, tick=tick)
        if plot is not None:
            bench.plot(res, plot)
    except UnicacheError as err:
        _fail("live", err)
    if json_out:
        sys.stdout.write(json.dumps(res.as_json()) + "\n")
        return
    # the table make bench records (unicache.bench.record), so both read alike
    from unicache.bench.record import bench_named

    head, rows = bench_named("live").render(res.as_json())
    table = Table(title=f"{res.guests} busy guest(s), daemon interval {res.interval_s:g} s, "
                        f"{res.window_s:.0f} s window, load {res.load[0]:.1f}-{res.load[1]:.1f}")
    for col in head:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


@app.command("programs")
def programs(
    rounds: Annotated[int, typer.Option(
        help="Timed rounds: per round each program runs twice under the shim and twice "
             "without, alternating (W O O W, then O W W O); each run pairs with its "
             "neighbour of the other side.")] = 5,
    tiny: Annotated[bool, typer.Option(
        help="Small trees and few files, for make test: with --rounds 1 a run of some "
             "20 s under TCG (boot included).")] = False,
    clock: Annotated[str, typer.Option(
        help="The guest's clock. instructions: QEMU counts the guest's instructions "
             "(-icount, one instruction a nanosecond, TCG, one vCPU), so a run's time is "
             "its work, the same from run to run whatever else the host does; wall: the "
             "host's clock (KVM where usable); auto: instructions under TCG, wall "
             "under KVM.")] = "auto",
    open_sample: Annotated[str | None, typer.Option(
        metavar="BYTES:SHIFT",
        help="The guest agent's open sample (unicache-agent --open-sample): which opens "
             "the shims count; 0:0 counts every open, 262144:15 practically none of "
             "the files up to 256 KiB [default: the agent's own].")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Ordinary programs in a real guest, with and without the shim, nothing placed.

    Boots one guest from the project's image (make image) with its agent running and no
    host daemon: the agent's table is there and empty, the shim (LD_PRELOAD of the image's
    libunicache.so) counts reads and places nothing. Times tar, grep -r, sha256sum, a
    python3 import and a sqlite3 query, each on the guest's clock, alternating with and
    without the preload; per program the median seconds of each side and the speed ratio
    (without / with: 1.0 is no cost) with its 95 % interval, against the goal of 0.98.
    Fails when a program's output differs between the sides, or when the shim was not
    live in a run under it.
    """
    from rich.progress import Progress

    try:
        from unicache.bench import guest_programs as bench
        from unicache.bench.guest_programs_run import run_guest_programs

        with Progress(console=_err, transient=True) as progress:
            task = progress.add_task("programs bench: boot", total=bench.steps(rounds))

            def tick(done: str) -> None:
                progress.update(task, advance=1, description=f"programs bench: {done} done")

            res = run_guest_programs(rounds=rounds, tiny=tiny, tick=tick, clock=clock,
                                     open_sample=open_sample)
    except UnicacheError as err:
        _fail("programs", err)
    if json_out:
        sys.stdout.write(json.dumps(res.as_json()) + "\n")
        return
    # the table make bench records (unicache.bench.record), so both read alike; the
    # commands, too long for a column on a terminal, follow it
    from unicache.bench.record import bench_named

    head, rows = bench_named("programs").render(res.as_json())
    keep = [i for i, col in enumerate(head) if col != "command"]
    table = Table(title=f"ordinary programs in a guest ({res.accel}, {res.clock} clock), "
                        f"{res.rounds} round(s), agent running, nothing placed; "
                        f"{res.seconds:.0f} s, load {res.load[0]:.1f}-{res.load[1]:.1f}")
    for i in keep:
        table.add_column(head[i], justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    out = Console()
    out.print(table)
    for p in res.programs:
        out.print(f"{p.name}: {p.command}", markup=False, highlight=False, soft_wrap=True)


@app.command("record")
def record(
    out: Annotated[Path, typer.Option(help="Directory for each benchmark's JSON.")] = Path(
        "build/bench"),
    doc: Annotated[Path, typer.Option(
        help="The page whose generated blocks (<!-- bench:NAME -->) get the tables.")] = Path(
        "docs/PERFORMANCE.md"),
    only: Annotated[str | None, typer.Option(
        help="Benchmarks to run, separated by commas (default: all).")] = None,
    tiny: Annotated[bool, typer.Option(
        help="Run each at a size of seconds (checks that each runs and emits its schema).")
    ] = False,
    calibrate: Annotated[bool | None, typer.Option(
        "--calibrate/--no-calibrate", show_default=False,
        help="Write the simulator's calibration of the shim's cost per call "
             "(tools/sim/python/unicache_sim/guest/shimcost.toml) from the shim's run, beside "
             "--doc's page (default: yes, but not with --tiny).")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Run every benchmark (make bench): JSON under --out, tables into --doc's blocks.

    The shim's, the policy round's (a moderate size), the live daemon's (real guests: make
    image) and the simulator's, each with --json; each JSON must hold its schema. The
    tables replace the blocks between <!-- bench:NAME --> and <!-- /bench:NAME --> with the
    date, the load and the command; the rest of the page stays.
    """
    from rich.progress import Progress

    try:
        from unicache.bench import record as rec

        names = [n.strip() for n in only.split(",") if n.strip()] if only else None
        for name in names or ():
            rec.bench_named(name)
        count = len(names) if names else len(rec.BENCHES)
        with Progress(console=_err, transient=True) as progress:
            task = progress.add_task("benchmarks", total=count)

            started: list[str] = []

            def tick(name: str) -> None:  # called as each benchmark starts
                progress.update(task, completed=len(started),
                                description=f"bench {name} ({len(started) + 1}/{count})")
                started.append(name)

            done = rec.record(out, doc, names, tiny=tiny, tick=tick,
                              calibrate=not tiny if calibrate is None else calibrate)
    except UnicacheError as err:
        _fail("record", err)
    if json_out:
        sys.stdout.write(json.dumps([{"bench": r.name, "json": str(r.json_path),
                                      "seconds": round(r.seconds, 1)} for r in done]) + "\n")
        return
    table = Table(title=f"benchmarks recorded in {doc}")
    for col in ("bench", "JSON", "seconds"):
        table.add_column(col)
    for r in done:
        table.add_row(r.name, str(r.json_path), f"{r.seconds:.0f}")
    Console().print(table)
