"""`make demo`: one real VM managed by unicache, measured honestly, then the simulator.

1. boots a 2-vCPU guest from the built image (TCG or KVM, chosen by a probe);
2. starts the daemon with --unify l2 (each core with its private L2 is a cache unit: the
   only multi-unit setting a host with one LLC group has) and checks that a placement
   table reached the guest before measuring;
3. in the guest: files larger than one L2 but smaller than two, read by the MFC read
   microbenchmark, grep and wc, without the shim (off) and under it (on), alternated
   ROUNDS times in the same run; the table shows medians;
4. shows the daemon's decisions as they happen and the per-vCPU reads per chunk the
   guest reported;
5. colors and replicas: the guest has a vCPU on each of two guest nodes and colored
   memory-only nodes; a throttled backup stream gets SRM-buffer colors (at least
   :data:`COLORED_FLOOR` of its page cache lands on the colored nodes, checked with
   move_pages in the guest) and a hot file read
   by two processes on the other node gets NCC replicas, one copy per chunk in the
   agent's store on that node, served to both (checked: the store's files and bytes, the
   shims' mappings), dropped again when a writer without the shim changes the file;
6. prints what the simulator predicts for the same workload on opteron-16 and epyc-2s;
7. stops everything: the daemon must exit 0 with every vCPU thread's affinity back as it
   was (read from /proc), and no process the demo started may be left, also when a step
   failed.

Every step that shows a mechanism checks it; the demo names each one that did not work
and exits 1 (without the shim in the guest: no table, no reads reported, no colors, no
replica served).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

# the demo's own modules, beside it (python tools/demo.py puts tools/ on the path)
from demo_checks import (
    COLORED_FLOOR,
    Started,
    always_place_note,
    colored_share,
    describe_entry,
    host_note,
    hot_file_replicas,
    last_tick,
    leftover_processes,
    log_records,
    per_vcpu_reads,
    shared_replica_failure,
)
from demo_guest import (
    HOT_READ,
    PAGE_NODES,
    READ_BENCH,
    SHIM_STATS,
    STORE_USAGE,
    STREAM_READ,
    TOOL_BENCH,
)
from rich.console import Console
from rich.table import Table
from unicache import policystate
from unicache.errors import UnicacheError
from unicache.host.linux.affinity import thread_start_time
from unicache.host.linux.perf import hardware_counters_available
from unicache.host.qemu import (
    BACKING_COLORED,
    QemuVm,
    VmConfig,
    VmRecord,
    list_vms,
    parse_numa,
)
from unicache.host.qemu.colored import host_page_colors
from unicache.policy.ncc.memory import replica_bytes
from unicache.topology import Topology, Unify
from unicache.topology.sysfs import discover_topology

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "demo"
VENV_BIN = Path(sys.executable).parent
#: the guest's shim; UNICACHE_DEMO_SHIM=/nowhere runs the guest without it (the demo must
#: then fail, naming what did not work)
SHIM = os.environ.get("UNICACHE_DEMO_SHIM", "/usr/lib/unicache-agent/libunicache.so")
SECONDS = 4
#: the hot file two processes read from the node without its page cache (NCC)
HOT_SIZE = 1 << 20
#: off/on rounds, alternated; the table shows the medians
ROUNDS = 3
console = Console(width=None if sys.stdout.isatty() else 120)

class DemoError(RuntimeError):
    """A step that cannot go on (a guest command failed); the demo names it and exits 1."""


def step(text: str) -> None:
    """Print a step header."""
    console.print(f"\n[bold]== {text}[/bold]")


def guest(vm: QemuVm, script: str, timeout: float = 120.0) -> str:
    """Run a shell script in the guest.

    :raises DemoError: when it fails (the demo names the command's exit code and stderr).
    """
    result = vm.run_in_guest(["sh", "-c", script], timeout=timeout)
    if not result.ok:
        raise DemoError(f"guest command failed ({result.exit_code}): {result.stderr.strip()}")
    return str(result.stdout)


def measure(vm: QemuVm, files: list[str], shim: bool) -> dict[str, float]:
    """Read throughput (MB/s) of the read benchmark, grep and wc, with or without the shim."""
    env = f"LD_PRELOAD={SHIM} " if shim else ""
    listing = " ".join(files)
    out: dict[str, float] = {}
    out["read"] = float(guest(
        vm, f"{env}python3 -c '{READ_BENCH}' {SECONDS} {listing}", timeout=SECONDS * 10
    ).strip())
    for tool, argv in (("grep", "['grep', '-c', 'unicache-needle']"), ("wc", "['wc', '-l']")):
        preload = SHIM if shim else "-"
        script = f"python3 -c '{TOOL_BENCH}' {SECONDS / 2} \"{argv}\" {preload} {listing}"
        out[tool] = float(guest(vm, script, timeout=SECONDS * 10).strip())
    return out


def measure_interleaved(vm: QemuVm, files: list[str]
                        ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Off and on, alternated :data:`ROUNDS` times under the same conditions (as the shim
    bench does): a drift of the shared machine then hits both sides alike.

    :returns: (off, on): each workload's MB/s per round.
    """
    off: dict[str, list[float]] = defaultdict(list)
    on: dict[str, list[float]] = defaultdict(list)
    for n in range(ROUNDS):
        console.print(f"round {n + 1} of {ROUNDS}: off, then on", highlight=False)
        for side, shim in ((off, False), (on, True)):
            for name, value in measure(vm, files, shim).items():
                side[name].append(value)
    return off, on


def affinities(vm: QemuVm) -> dict[int, frozenset[int]]:
    """Each vCPU thread's CPU affinity, read from /proc (sched_getaffinity)."""
    return {v: frozenset(os.sched_getaffinity(t)) for v, t in vm.vcpu_threads().items()}


def colors_and_replicas(vm: QemuVm, log: Path, colored_nodes: tuple[int, ...]) -> list[str]:
    """SRM-buffer colors for a backup stream, an NCC replica for a hot file (daemon running).

    :returns: what did not work (empty: both mechanisms did).
    """
    failed: list[str] = []
    stream, hot = "/var/tmp/backup.img", "/var/tmp/hot.db"
    step("Colors (SRM-buffer): a throttled backup stream read once on vCPU 0 (guest node 0); "
         f"the daemon colors it ahead onto the colored nodes {colored_nodes}, a new color "
         "every T_l = 256 pages")
    guest(vm, f"head -c 12M /dev/urandom > {stream} && sync && "
              "echo 3 > /proc/sys/vm/drop_caches")
    start = last_tick(log)
    guest(vm, f"LD_PRELOAD={SHIM} taskset -c 0 python3 -c '{STREAM_READ}' {stream}", timeout=300)
    where = json.loads(guest(vm, f"python3 -c '{PAGE_NODES}' {stream}"))
    pages = {int(k): int(v) for k, v in where["nodes"].items()}
    total = max(sum(pages.values()), 1)
    table = Table("guest node", "page-cache pages of the stream", "share",
                  title="where the stream's page cache landed (move_pages in the guest)")
    for node, count in sorted(pages.items()):
        label = f"{node} (colored)" if node in colored_nodes else str(node)
        table.add_row(label, str(count), f"{count / total:.0%}")
    console.print(table)
    share = colored_share(pages, colored_nodes)
    console.print(f"{share:.0%} of the stream's page cache is on the colored nodes (at least "
                  f"{COLORED_FLOOR:.0%} must be). The first chunks are read before the host "
                  "has seen the stream: its report comes an interval later and the table a "
                  "round after that.", highlight=False)
    if share < COLORED_FLOOR:
        failed.append(f"colors: {share:.0%} of the stream's page-cache pages landed on the "
                      f"colored nodes, under the {COLORED_FLOOR:.0%} floor")
    runs = log_records(log, "assign-color", since=start)
    console.print(f"{len(runs)} color runs in the decision log while the stream ran; the first:")
    for rec in runs[:4]:
        console.print(f"  tick {rec['tick']}: {rec['reason']}", highlight=False)

    step("Replicas (NCC): a hot file cached on node 0, read again and again by two processes "
         "on vCPU 1 (guest node 1), served from one copy in the agent's store")
    guest(vm, f"head -c {HOT_SIZE} /dev/urandom > {hot} && sync && "
              f"echo 3 > /proc/sys/vm/drop_caches && taskset -c 0 cat {hot} > /dev/null")
    start = last_tick(log)
    before = json.loads(guest(vm, f"python3 -c '{SHIM_STATS}'"))
    reader = f"LD_PRELOAD={SHIM} taskset -c 1 python3 -c '{HOT_READ}' 6 {hot}"
    guest(vm, f"{reader} & {reader} & wait", timeout=180)
    stats = json.loads(guest(vm, f"python3 -c '{SHIM_STATS}'"))
    store = json.loads(guest(vm, f"python3 -c '{STORE_USAGE}'"))
    made = log_records(log, "replicate", since=start)
    for rec in made[:4]:
        console.print(f"  tick {rec['tick']}: replicate chunk {rec['file']}:{rec['chunk']} on "
                      f"guest node {rec['node']}: {rec['reason']}", highlight=False)
    serves = stats["replica_serves"] - before["replica_serves"]
    mappings = stats["replica_fills"] - before["replica_fills"]
    on_node1 = {(r["file"], r["chunk"]) for r in made if r["node"] == 1}
    table = Table("guest node", "replica files", "bytes held", title="the agent's replica store")
    for name, held in sorted(store.items()):
        table.add_row(name[4:], str(held["files"]), str(held["bytes"]))
    console.print(table)
    console.print(f"2 processes: {mappings} replica mappings, {serves} reads served from the "
                  f"shared node-local copies, {stats['replica_rejects']} refused (file changed "
                  f"since the fill); {stats['color_reads']} colored reads", highlight=False)
    if not made or serves <= 0:
        failed.append(f"replicas: {len(made)} replicate decisions, {serves} reads served "
                      "from a replica")
    else:
        # the node's store may also hold replicas of chunks read earlier in the demo: count
        # the hot file's (replica files are named FILE_ID.CHUNK.CHUNK_SIZE.SEQ)
        hot_store = hot_file_replicas(store, {int(f, 16) for f, _ in on_node1})
        files = hot_store.get("node1", {}).get("files", 0)
        why = shared_replica_failure(hot_store, 1, len(on_node1), mappings, 2,
                                     replica_bytes(HOT_SIZE // max(files, 1)))
        if why is not None:
            failed.append(why)
    start = last_tick(log)
    guest(vm, f"echo appended-without-the-shim >> {hot} && sync")
    time.sleep(3)  # the agent's fanotify sees the write; the next report carries it
    dropped = log_records(log, "drop-replica", since=start)
    for rec in dropped[:4]:
        console.print(f"  tick {rec['tick']}: drop replica of chunk {rec['file']}:{rec['chunk']} "
                      f"on guest node {rec['node']}: {rec['reason']}", highlight=False)
    if made and not dropped:
        failed.append("replicas: a write without the shim dropped no replica")
    return failed


def main() -> int:
    """Run the demo; returns the exit code.

    Whatever happens, it ends by checking that no process it started is left (and stops
    any that is), and it names every step that did not work.
    """
    failed: list[str] = []
    started: list[Started] = []
    try:
        run_demo(failed, started)
    except (DemoError, UnicacheError) as err:  # a step that could not go on: named below
        failed.append(f"stopped early: {err}")
    finally:
        # also when a step failed or the demo was interrupted: nothing of it may stay
        for pid, what in leftover_processes(started, os.getpid()):
            console.print(f"[red]left behind: {what}; killing it[/red]")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            failed.append(f"processes: {what} was left behind")
    for what in failed:
        console.print(f"[red]did not work: {what}[/red]")
    if failed:
        return 1
    console.print("\nall stopped: no process of the demo is left, the daemon restored every "
                  f"affinity (decision log: {BUILD / 'state' / 'decisions.jsonl'})")
    return 0


def run_demo(failed: list[str], started: list[Started]) -> None:
    """The demo's steps; each adds what did not work to ``failed`` and each process it
    starts to ``started``.

    :raises DemoError: when a step cannot go on.
    :raises UnicacheError: when the guest cannot be started.
    """
    BUILD.mkdir(parents=True, exist_ok=True)
    registry = BUILD / "vms"
    state = BUILD / "state"
    os.environ["UNICACHE_STATE_DIR"] = str(registry)
    host = discover_topology()
    l2 = next(lv for lv in host.levels if lv.level == 2)
    file_size = l2.size_bytes * 3 // 4  # two files: 1.5 x L2 in all
    units = host.units(Unify.L2)

    groups = len(host.llc_groups())
    step(f"This host: {len(host.cpus)} CPUs, {groups} LLC group{'s' if groups > 1 else ''}; "
         f"with --unify l2 {len(units)} units of {l2.size_bytes >> 10} KiB (each core and its "
         "private L2)")
    for old in list_vms(registry):
        QemuVm.attach(old.name, registry).stop()

    ncolors = host_page_colors()
    quarter = ncolors // 4
    layout = f"0:384/1:384/-:128@0-{quarter - 1}/-:128@{quarter}-{2 * quarter - 1}"
    step(f"Booting a 2-vCPU guest with the unicache agent (accelerator chosen by a probe); "
         f"guest NUMA {layout}: vCPU 0 on node 0, vCPU 1 on node 1, nodes 2 and 3 "
         f"memory-only, colored with the first and second quarter of this host's {ncolors} "
         "LLC page colors")
    # --fanotify: the agent also sees writers without the shim (NCC drops their replicas)
    vm = QemuVm(VmConfig("demo", vcpus=2, memory_mib=1024, numa=parse_numa(layout, 2, 1024),
                         append=("unicache.agent_args=--fanotify",)), registry,
                progress=lambda line: console.print(line, highlight=False))
    record = vm.start()  # a QEMU a failed start leaves is a descendant: still found at the end
    started.append(Started(record.pid, record.start_ticks, "QEMU of the guest 'demo'"))
    try:
        _with_guest(vm, record, host, l2.size_bytes, file_size, ncolors, state, failed,
                    started)
    finally:
        step("Stopping the guest")
        vm.stop()


def _with_guest(vm: QemuVm, record: VmRecord, host: Topology, l2_bytes: int, file_size: int,
                ncolors: int, state: Path, failed: list[str], started: list[Started]) -> None:
    """The steps with the guest running (the caller stops it)."""
    why = vm.accel.line() if vm.accel is not None else f"accelerator: {record.accel}"
    console.print(f"guest up: pid {record.pid}; {why}")
    for node in record.numa:
        if node.colors and node.backing == BACKING_COLORED:
            console.print(f"colored node {node.node}: {node.memory_mib} MiB from host colors "
                          f"{min(node.colors)}-{max(node.colors)} of {ncolors}, backed by "
                          f"{node.backing}", highlight=False)
        elif node.colors:
            console.print(f"node {node.node}: {node.memory_mib} MiB backed by {node.backing}, "
                          "not color-restricted (this QEMU has no memory-backend-colored: "
                          "`make qemu` builds one); it still shows where the guest puts the "
                          "stream's page cache", highlight=False)
    console.print("guest view: " + " ".join(guest(
        vm, "for n in /sys/devices/system/node/node*; do "
            "echo \"$(basename $n):cpus=$(cat $n/cpulist),$(grep MemTotal $n/meminfo | "
            "awk '{print $4$5}')\"; done").split()), highlight=False)
    files = [f"/root/data/f{i}" for i in range(2)]
    writes = " && ".join(f"head -c {file_size} /dev/urandom > {f}" for f in files)
    guest(vm, f"mkdir -p /root/data && {writes} && cat /root/data/* >/dev/null")
    console.print(f"guest files: 2 x {file_size >> 10} KiB = {2 * file_size >> 10} KiB "
                  f"(one L2 is {l2_bytes >> 10} KiB), in the guest's page cache")

    pinned_before = affinities(vm)
    step("Starting the daemon (--unify l2 --always-place --log-chunks); its decisions as they "
         "happen:")
    accel = vm.accel.accel if vm.accel is not None else str(record.accel)
    reason = vm.accel.reason if vm.accel is not None else "from the VM's record"
    console.print(always_place_note(host, accel, reason, hardware_counters_available()),
                  highlight=False)
    log = state / "decisions.jsonl"
    if log.exists():
        log.unlink()
    # the demo starts from nothing learned, so that its checks see only this run's tables (a
    # previous run's state would be forgotten at the new guest's first report, its table
    # never sent to it: unicache.policy.guestboot); the journals stay (crash recovery)
    (state / policystate.STATE_FILE).unlink(missing_ok=True)
    daemon = subprocess.Popen(
        [str(VENV_BIN / "unicache"), "run", "--unify", "l2", "--always-place",
         "--interval", "1", "--state-dir", str(state), "--connect", "none",
         "--log-chunks"],
        stdout=sys.stdout, stderr=sys.stderr,
    )
    started.append(Started(daemon.pid, thread_start_time(daemon.pid), "the unicache daemon"))
    try:
        time.sleep(3)
        guest(vm, f"LD_PRELOAD={SHIM} python3 -c '{READ_BENCH}' 4 {' '.join(files)} >/dev/null",
              timeout=60)  # warm-up: the guest reports, the host publishes a table
        time.sleep(2)
        tables = [r for r in log_records(log, "publish-placement") if r.get("vm") == "demo"]
        if not any(r.get("entries") for r in tables):
            failed.append("placement: no table with entries was published before the 'on' "
                          "runs (did the guest's shim report its reads?)")

        step(f"unicache OFF and ON, {ROUNDS} rounds alternated: read benchmark, grep and wc, "
             "without the shim, then under it with the daemon's placement")
        off, on = measure_interleaved(vm, files)
        time.sleep(1.5)
        failed += colors_and_replicas(vm, log, colored_nodes=(2, 3))
    finally:
        failed += stop_daemon(daemon, vm, pinned_before)

    table = Table("workload", "unicache off (MB/s)", "unicache on (MB/s)", "on / off",
                  title=f"guest throughput, medians of {ROUNDS} alternated rounds of this run")
    for name in ("read", "grep", "wc"):
        o, n = statistics.median(off[name]), statistics.median(on[name])
        ratio = statistics.median(b / a for a, b in zip(off[name], on[name], strict=True))
        table.add_row(name, f"{o:.0f}", f"{n:.0f}", f"{ratio:.2f}")
    console.print(table)
    console.print(host_note(host, record.accel))

    reads = per_vcpu_reads(log, "demo")
    if not reads:
        failed.append("shim: the guest reported no per-vCPU reads (is the shim loaded?)")
    chunks = Table("chunk (file id:index)", "vCPU 0 bytes", "vCPU 1 bytes",
                   title="per-vCPU reads per chunk, as the guest reported them (largest first)")
    for chunk, by_vcpu in sorted(reads.items(), key=lambda kv: -sum(kv[1].values()))[:10]:
        chunks.add_row(chunk, str(by_vcpu.get(0, 0)), str(by_vcpu.get(1, 0)))
    console.print(chunks)
    placements = [json.loads(line) for line in log.read_text().splitlines()
                  if '"publish-placement"' in line]
    if placements:
        last = placements[-1]
        console.print(f"last placement table (v{last['version']}): {last['reason']}")
        for entry in last["entries"][:8]:
            console.print("  " + describe_entry(entry), highlight=False)

    step("What the simulator predicts for the read benchmark on machines with several LLCs")
    for model, sizes in (("opteron-16", "2,8"), ("epyc-2s", "64,256")):
        sim = subprocess.run([str(VENV_BIN / "unicache-sim"), "mfc", "--model", model,
                              "--workload", "read", "--dist", "uniform", "--ws-mb", sizes],
                             check=False)
        if sim.returncode != 0:
            failed.append(f"simulator: unicache-sim mfc --model {model} exited {sim.returncode}")


def stop_daemon(daemon: subprocess.Popen[bytes], vm: QemuVm,
                pinned_before: Mapping[int, frozenset[int]]) -> list[str]:
    """SIGTERM the daemon; it must exit 0 with every vCPU thread's affinity back.

    :returns: what did not work.
    """
    daemon.send_signal(signal.SIGTERM)
    try:
        code = daemon.wait(timeout=30)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
        return ["daemon: still running 30 s after SIGTERM (killed)"]
    if code != 0:
        return [f"daemon: exited {code} on SIGTERM, not 0"]
    try:
        now = affinities(vm)
    except OSError as err:  # the guest's QEMU is gone: its threads cannot be read
        return [f"daemon: the vCPU threads' affinities cannot be read: {err}"]
    if now != pinned_before:
        return [f"daemon: the vCPU threads' affinities were not restored ({now} instead of "
                f"{pinned_before})"]
    console.print("daemon exited 0; every vCPU thread's affinity is back as it was (read "
                  "from /proc)")
    return []


if __name__ == "__main__":
    sys.exit(main())
