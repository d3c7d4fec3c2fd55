"""``make bench`` (``unicache bench record``): run every benchmark, keep its JSON, table it.

Every benchmark of the project (:data:`BENCHES`: the shim's, the policy round's, the live
daemon's, ordinary programs' in a guest, the simulator's) is run as its own command with
``--json``; its output must be one JSON object holding the benchmark's :attr:`Bench.keys`
(its schema, the keys its table reads), is written to ``OUT/<name>.json``, and its table
replaces the generated block of docs/PERFORMANCE.md between ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->`` (:func:`splice`), with the date, the machine's load before and
after, and the command. Everything outside the blocks (the analysis written by hand) stays
as it is; a block missing from the page is added at its end.

``tiny=True`` runs every command at a size that takes seconds (``make test`` checks that
every command runs and emits its schema, never its timings).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache.bench.shim_files import sample_text
from unicache.errors import BenchError

#: the venv's bin directory (``unicache``, ``unicache-sim``)
BIN = Path(sys.executable).parent
#: where a live run's plot goes (beside the page)
LIVE_PLOT = "docs/figures/bench-live.png"

Row = tuple[str, ...]
RenderT = Callable[[dict[str, Any]], tuple[Row, list[Row]]]


def _size(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def _ci(cell: dict[str, Any], what: str = "", unit: str = "ns") -> str:
    """``added [low, high]`` of a shim figure (``what`` "control_": its control's)."""
    mid = cell[f"{what}{unit}" if what else f"added_{unit}"]
    return (f"{mid:+.1f} [{cell[f'{what}ci_low_{unit}']:+.1f}, "
            f"{cell[f'{what}ci_high_{unit}']:+.1f}]")


def _widest_control(cells: list[dict[str, Any]]) -> str:
    if not cells:
        return ""
    widest = max(cells, key=lambda c: max(abs(c["control_ci_low_ns"]),
                                          abs(c["control_ci_high_ns"])))
    return _ci(widest, "control_")


def _shim(doc: dict[str, Any]) -> tuple[Row, list[Row]]:
    """One row group per table state (rows kind/pattern, columns sizes, cells the added ns
    per call [95 % CI]; then the widest control of each size); then the pipe and socket,
    the process starts and the budgets."""
    cells: list[dict[str, Any]] = doc["cells"]
    sizes = sorted({c["size"] for c in cells} | {f["size"] for f in doc["fds"]})
    head = ("table", "call: added ns per call [95 % CI]", *(_size(s) for s in sizes))
    rows: list[Row] = []
    for table in dict.fromkeys(c["table"] for c in cells):
        mine = [c for c in cells if c["table"] == table]
        by = {(c["kind"], c["pattern"], c["size"]): c for c in mine}
        for kind, pattern in dict.fromkeys((c["kind"], c["pattern"]) for c in mine):
            rows.append((table, f"{kind} {pattern}", *(
                _ci(by[kind, pattern, s]) if (kind, pattern, s) in by else "" for s in sizes)))
        rows.append((table, "control (null preload): its widest", *(
            _widest_control([c for c in mine if c["size"] == s]) for s in sizes)))
    for f in doc["fds"]:
        rows.append(("fds", f"{f['kind']} write + read", *(
            f"{_ci(f)}; control {_ci(f, 'control_')}" if s == f["size"] else ""
            for s in sizes)))
    first = [""] * (len(sizes) - 1)
    for p in doc["spawn"]:
        rows.append(("start", f"{p['kind']} ({' '.join(p['command'])}), us",
                     f"{_ci(p, unit='us')}, ratio {p['ratio']:.3f}; control "
                     f"{_ci(p, 'control_', 'us')}", *first))
    for b in doc["budgets"]:
        upper = "not run" if b["upper_ns"] is None else (
            f"upper {b['upper_ns']:.1f}: {'met' if b['met'] else 'NOT met'}")
        floor = b.get("floor")
        if floor is not None:
            upper += (f"; floor {floor['median_ns']:+.1f} [{floor['low_ns']:+.1f}, "
                      f"{floor['high_ns']:+.1f}]")
        rows.append(("budget", f"{b['case']} <= {b['limit_ns']:g} ns", upper, *first))
    return head, rows


def _shim_files(doc: dict[str, Any]) -> str:
    """The files cells' table (rows open samples, columns sizes, cells the added ns per
    file [95 % CI]; then the widest control of each size), after a sentence saying what
    they measure; nothing when the run had none."""
    files: list[dict[str, Any]] = doc.get("files", [])
    if not files:
        return ""
    sizes = sorted({f["size"] for f in files})
    by = {(f["sample"], f["size"]): f for f in files}
    head = ("files", "open sample: added ns per file [95 % CI]", *(_size(s) for s in sizes))
    samples = {f["sample"]: sample_text(f["sample_bytes"], f["sample_shift"]) for f in files}
    rows: list[Row] = [("files", f"{name}: {what}", *(
        _ci(by[name, s]) if (name, s) in by else "" for s in sizes))
        for name, what in samples.items()]
    rows.append(("files", "control (null preload): its widest", *(
        _widest_control([f for f in files if f["size"] == s]) for s in sizes)))
    return (f"\n\nFiles: what a program that reads many small files (tar: open, fstat, read, "
            f"close per file) pays the shim per file. Each file is opened read-only, "
            f"fstat'ed, read to EOF (its data, then the read that finds EOF) and closed, "
            f"going round {doc.get('files_per_dir', 256)} page-cached files of the size, "
            f"under the unplaced table ({doc.get('table_entries', 0):,} entries, none naming "
            f"the files). The shim's work here is per open (learning the file, counting "
            f"it, its run sent at close), which the open sample the table carries spares "
            f"the opens it skips: `every` is the cost of a counted file, `never` of a "
            f"skipped one, `sampled` the mix of the two that the agent's opt-in "
            f"`--open-sample 262144:3` gives.\n\n"
            f"{markdown_table(head, rows)}")


def _policy(doc: dict[str, Any]) -> tuple[Row, list[Row]]:
    head = ("VMs", "chunks", "records/round", "p50 ms", "p99 ms", "CPU p99 ms", "B/chunk",
            "peak RSS MiB", "gc between rounds p50 / max ms", "full gc ms")
    return head, [(f"{p['vms']:,}", f"{p['tracked_chunks']:,}", f"{p['records_per_round']:,}",
                   f"{p['p50_ms']:.1f}", f"{p['p99_ms']:.1f}", f"{p['cpu_p99_ms']:.1f}",
                   f"{p['bytes_per_chunk']:.0f}", f"{p['peak_rss_mib']:.0f}",
                   f"{p.get('gc_p50_ms', 0.0):.1f} / {p.get('gc_max_ms', 0.0):.1f}",
                   f"{p.get('gc_full_ms', 0.0):.0f}")
                  for p in doc["points"]]


def _ms(value: float | None) -> str:
    return "missed" if value is None else f"{value:.0f}"


def _live(doc: dict[str, Any]) -> tuple[Row, list[Row]]:
    head = ("guests", "interval s", "daemon CPU % (window / all)", "daemon RSS MiB (peak)",
            "agent CPU % of a vCPU", "channel in / out B/s (trials)", "reaction p50 / p95 ms",
            "missed", "read->publish / publish->table p50 ms")
    trials = len(doc["trials"])
    return head, [(
        str(doc["guests"]), f"{doc['interval_s']:g}",
        f"{doc['daemon_cpu_pct']:.2f} / {doc['daemon_cpu_all_pct']:.2f}",
        f"{doc['daemon_rss_mib']:.0f} ({doc['daemon_rss_peak_mib']:.0f})",
        " ".join(f"{x:.2f}" for x in doc["agent_cpu_pct"]),
        f"{doc['channel_in_bps']:.0f} / {doc['channel_out_bps']:.0f} "
        f"({doc['trials_channel_in_bps']:.0f} / {doc['trials_channel_out_bps']:.0f})",
        f"{_ms(doc['reaction_p50_ms'])} / {_ms(doc['reaction_p95_ms'])}",
        f"{doc['reaction_missed']}/{trials}",
        f"{_ms(doc['to_publish_p50_ms'])} / {_ms(doc['publish_to_table_p50_ms'])} "
        f"(+-{doc['clock_bound_ms']:.0f})")]


def _sim(doc: dict[str, Any]) -> tuple[Row, list[Row]]:
    head = ("model", "line accesses", "multicore M/s", "single core M/s", "pycachesim M/s",
            "ratio", "hit counts equal")
    pyc = doc.get("pycachesim_rate")
    return head, [(str(doc["model"]), f"{doc['accesses']:,}",
                   f"{doc['multicore_rate'] / 1e6:.1f}", f"{doc['single_core_rate'] / 1e6:.1f}",
                   "-" if pyc is None else f"{pyc / 1e6:.1f}",
                   "-" if doc.get("ratio") is None else f"{doc['ratio']:.1f}x",
                   str(doc.get("counts_equal", "-")))]


def _programs(doc: dict[str, Any]) -> tuple[Row, list[Row]]:
    """One row per program: its medians, the speed ratio (without / with) [95 % CI] and
    the goal; what the shim counted of it (its reads under the shim: stdio's are unseen)."""
    clock = doc.get("clock", "wall")
    head = ("program", "command", f"with s ({clock} clock)", "without s",
            "ratio without/with [95 % CI]", "pairs", f"goal >= {doc['goal']:g}",
            "shim counted")
    rows: list[Row] = []
    for p in doc["programs"]:
        goal = ("met" if p["interval_met"] else f"met (interval from {p['ci_low']:.3f})") \
            if p["met"] else "NOT met"
        counted = (f"{p['counted_reads']:,} reads, {p['counted_bytes'] / 2**20:.1f} MiB"
                   if p["counted_bytes"] else "none (stdio)" if not p["counted"] else "none")
        # a pipe inside a code span still ends a markdown table's cell
        command = p["command"].replace("|", "\\|")
        rows.append((p["name"], f"`{command}`", f"{p['with_s']:.3f}",
                     f"{p['without_s']:.3f}",
                     f"{p['ratio']:.3f} [{p['ci_low']:.3f}, {p['ci_high']:.3f}]",
                     str(p["pairs"]), goal, counted))
    return head, rows


@dataclass(frozen=True, slots=True)
class Bench:
    """One benchmark command.

    :param name: its name (the JSON file's and the doc block's).
    :param argv: the command at its recorded size (``--json`` is added).
    :param tiny: extra arguments for a run of seconds (``make test``).
    :param keys: the top-level keys its JSON must hold (what :attr:`render` reads).
    :param render: its JSON to a table (header, rows).
    :param more: what of its block follows that table (markdown: more tables, each with
        its sentence), from its JSON; nothing for most.
    """

    name: str
    argv: tuple[str, ...]
    tiny: tuple[str, ...]
    keys: frozenset[str]
    render: RenderT
    more: Callable[[dict[str, Any]], str] = lambda _: ""

    def command(self, tiny: bool = False) -> list[str]:
        """The command line (its first word a program of the venv)."""
        return [str(BIN / self.argv[0]), *self.argv[1:], *(self.tiny if tiny else ()), "--json"]

    def shown(self, tiny: bool = False) -> str:
        """The command as the doc shows it."""
        return shlex.join([self.argv[0], *self.argv[1:], *(self.tiny if tiny else ()), "--json"])


#: every benchmark, in the order ``make bench`` runs them
BENCHES: tuple[Bench, ...] = (
    # 25 processes per cell and preload: the interval over processes (shim_stats.py) is then
    # [x(8), x(18)] of them, where the command's default of 9 gives [x(2), x(8)]
    Bench("shim", ("unicache", "bench", "shim", "--rounds", "25"), ("--quick", "--rounds", "1"),
          frozenset({"cells", "fds", "files", "spawn", "budgets", "cpu", "seconds", "rounds"}),
          _shim, _shim_files),
    # a moderate size (the fleet-scale acceptance point, 1,000 VMs x 1 M chunks, is run by
    # hand: docs/PERFORMANCE.md "Policy round")
    Bench("policy", ("unicache", "bench", "policy", "--vms", "100,300", "--chunks", "100000",
                     "--rounds", "20"),
          ("--vms", "3", "--chunks", "40", "--rounds", "2", "--model", "opteron-16"),
          frozenset({"schema", "bench", "model", "points"}), _policy),
    Bench("live", ("unicache", "bench", "live", "--plot", LIVE_PLOT),
          ("--seconds", "5", "--trials", "2"),
          frozenset({"guests", "interval_s", "daemon_cpu_pct", "daemon_cpu_all_pct",
                     "daemon_rss_mib", "daemon_rss_peak_mib", "agent_cpu_pct",
                     "channel_in_bps", "channel_out_bps", "trials_channel_in_bps",
                     "trials_channel_out_bps", "reaction_p50_ms",
                     "reaction_p95_ms", "reaction_missed", "to_publish_p50_ms",
                     "publish_to_table_p50_ms", "clock_bound_ms", "trials", "samples"}),
          _live),
    Bench("programs", ("unicache", "bench", "programs"),
          ("--tiny", "--rounds", "1"),
          frozenset({"schema", "bench", "goal", "rounds", "tiny", "accel", "guest", "sizes",
                     "table", "programs", "all_met", "seconds", "load", "clock", "calls",
                     "starts"}), _programs),
    Bench("sim", ("unicache-sim", "bench"), ("--accesses", "200000", "--repeats", "1"),
          frozenset({"model", "accesses", "multicore_rate", "single_core_rate"}), _sim),
)


def bench_named(name: str) -> Bench:
    """The benchmark called ``name``.

    :raises BenchError: when there is none.
    """
    for bench in BENCHES:
        if bench.name == name:
            return bench
    raise BenchError(f"no benchmark {name!r} (there are {', '.join(b.name for b in BENCHES)})")


def check_schema(bench: Bench, doc: Any) -> dict[str, Any]:
    """``doc`` if it is an object holding the benchmark's keys.

    :raises BenchError: naming the missing keys.
    """
    if not isinstance(doc, dict):
        raise BenchError(f"bench {bench.name}: its JSON is not an object")
    missing = sorted(bench.keys - set(doc))
    if missing:
        raise BenchError(f"bench {bench.name}: its JSON lacks {', '.join(missing)}")
    return doc


def run_one(bench: Bench, tiny: bool = False, cwd: Path | None = None) -> dict[str, Any]:
    """Run one benchmark; its JSON (checked against its schema).

    :raises BenchError: when it fails or prints no JSON of its schema.
    """
    proc = subprocess.run(bench.command(tiny), capture_output=True, text=True, cwd=cwd,
                          check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:]
        raise BenchError(f"bench {bench.name} exited {proc.returncode}: "
                         f"{tail[0] if tail else 'no output'}")
    try:
        doc = json.loads(proc.stdout)
    except ValueError as err:
        raise BenchError(f"bench {bench.name} printed no JSON: {proc.stdout[-200:]!r}") from err
    return check_schema(bench, doc)


def markdown_table(head: Row, rows: Sequence[Row]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def block(bench: Bench, doc: dict[str, Any], when: str, load: tuple[float, float],
          tiny: bool = False) -> str:
    """The generated block's body: when, load, command, table."""
    head, rows = bench.render(doc)
    return (f"Generated by `make bench` on {when}, load average (1 min) {load[0]:.2f} before "
            f"and {load[1]:.2f} after, on {os.cpu_count()} CPUs:\n\n"
            f"```\n{bench.shown(tiny)}\n```\n\n{markdown_table(head, rows)}{bench.more(doc)}")


def splice(page: str, name: str, body: str) -> str:
    """``page`` with the block ``name`` holding ``body`` (added at the end if missing)."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    fresh = f"{start}\n{body}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(page):
        return pattern.sub(lambda _: fresh, page, count=1)
    return page.rstrip("\n") + f"\n\n{fresh}\n"


@dataclass(frozen=True, slots=True)
class Recorded:
    """One benchmark recorded.

    :param name: the benchmark.
    :param json_path: its JSON.
    :param seconds: how long it ran.
    """

    name: str
    json_path: Path
    seconds: float


def record(out: Path, doc_path: Path, names: Sequence[str] | None = None, tiny: bool = False,
           tick: Callable[[str], None] = lambda _: None, calibrate: bool = False,
           ) -> list[Recorded]:
    """Run the benchmarks (all, or ``names``), write ``out/<name>.json`` and their blocks
    in ``doc_path``, each as soon as it is done (a later failure keeps the earlier ones).
    With ``calibrate`` (``make bench``), the shim's run also writes the simulator's
    calibration of the shim's cost (:mod:`shim_calibration`).

    :raises BenchError: when one fails (those before it are recorded).
    """
    benches = [bench_named(n) for n in names] if names else list(BENCHES)
    out.mkdir(parents=True, exist_ok=True)
    done = []
    for bench in benches:
        tick(bench.name)
        load0, t0 = os.getloadavg()[0], time.monotonic()
        doc = run_one(bench, tiny, cwd=doc_path.resolve().parents[1])
        seconds = time.monotonic() - t0
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        path = out / f"{bench.name}.json"
        path.write_text(json.dumps(doc, indent=1) + "\n")
        page = doc_path.read_text() if doc_path.exists() else "# Performance\n"
        body = block(bench, doc, when, (load0, os.getloadavg()[0]), tiny)
        doc_path.write_text(splice(page, bench.name, body))
        if bench.name == "shim" and calibrate:
            # the simulated guest's cost per call, from this very run (unicache_sim.guest.shimcost;
            # imported only here: the simulator is not a dependency of the tables)
            from unicache.bench import shim_calibration

            shim_calibration.write_calibration(doc_path.resolve().parents[1], doc, when,
                                               bench.shown(tiny))
        done.append(Recorded(bench.name, path, seconds))
    return done
