"""`make demo`: one real VM managed by unicache, measured honestly, then the simulator.

1. boots a 2-vCPU guest from the built image (TCG or KVM, chosen by a probe);
2. starts the daemon with --unify l2 (each core with its private L2 is a cache unit —
   the only multi-unit setting a 2-core machine with one L3 has);
3. in the guest: files larger than one L2 but smaller than two, read by the MFC read
   microbenchmark, grep and wc — first without the shim (unicache off), then under it
   (unicache on), in the same run;
4. shows the daemon's decisions as they happen and the per-vCPU reads per chunk the
   guest reported;
5. prints what the simulator predicts for the same workload on opteron-16 and epyc-2s;
6. stops everything (daemon restores affinities; QEMU powered off) and checks that no
   process is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table
from unicache.host.qemu import QemuVm, VmConfig, list_vms
from unicache.topology import Unify, discover_topology

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "demo"
VENV_BIN = Path(sys.executable).parent
SHIM = "/usr/lib/unicache-agent/libunicache.so"
SECONDS = 6
console = Console(width=None if sys.stdout.isatty() else 120)

#: the MFC paper's read microbenchmark (§6.1): pick a file at random, pread it whole
READ_BENCH = r"""
import os, random, sys, time
files = sys.argv[2:]
fds = [os.open(f, os.O_RDONLY) for f in files]
sizes = [os.fstat(fd).st_size for fd in fds]
rng = random.Random(1)
total = 0
end = time.time() + float(sys.argv[1])
start = time.time()
while time.time() < end:
    i = rng.randrange(len(fds))
    off = 0
    while off < sizes[i]:
        n = len(os.pread(fds[i], 512 * 1024, off))
        off += n
        total += n
print(total / (time.time() - start) / 1e6)
"""


#: grep/wc over the files, again and again, timed; argv[3] is the shim to preload or "-"
TOOL_BENCH = r"""
import ast, os, subprocess, sys, time
argv = ast.literal_eval(sys.argv[2])
env = dict(os.environ)
files = sys.argv[4:]
if sys.argv[3] != "-":
    env["LD_PRELOAD"] = sys.argv[3]
total = 0
end = time.time() + float(sys.argv[1])
start = time.time()
while time.time() < end:
    for f in files:
        subprocess.run(argv + [f], env=env, stdout=subprocess.DEVNULL, check=False)
        total += os.path.getsize(f)
print(total / (time.time() - start) / 1e6)
"""


def step(text: str) -> None:
    """Print a step header."""
    console.print(f"\n[bold]== {text}[/bold]")


def guest(vm: QemuVm, script: str, timeout: float = 120.0) -> str:
    """Run a shell script in the guest; fail loudly if it fails."""
    result = vm.run_in_guest(["sh", "-c", script], timeout=timeout)
    if not result.ok:
        raise SystemExit(f"demo: guest command failed ({result.exit_code}): {result.stderr}")
    return result.stdout


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


def per_vcpu_reads(log: Path, vm: str) -> dict[str, dict[int, int]]:
    """Chunk -> vCPU -> bytes, summed over the guest reports in the decision log."""
    reads: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "guest-report" and rec.get("vm") == vm:
            for chunk in rec["chunks"]:
                for vcpu, nbytes in chunk["vcpu_bytes"]:
                    reads[f"{chunk['file']}:{chunk['chunk']}"][vcpu] += nbytes
    return reads


def main() -> int:
    """Run the demo; returns the exit code."""
    BUILD.mkdir(parents=True, exist_ok=True)
    registry = BUILD / "vms"
    state = BUILD / "state"
    os.environ["UNICACHE_STATE_DIR"] = str(registry)
    host = discover_topology()
    l2 = next(lv for lv in host.levels if lv.level == 2)
    file_size = l2.size_bytes * 3 // 4  # two files: 1.5 x L2 in all
    units = host.units(Unify.L2)

    step(f"This host: {len(host.cpus)} CPUs, one LLC group; with --unify l2 {len(units)} units "
         f"of {l2.size_bytes >> 10} KiB (each core and its private L2)")
    for old in list_vms(registry):
        QemuVm.attach(old.name, registry).stop()

    step("Booting a 2-vCPU guest with the unicache agent (accelerator chosen by a probe)")
    vm = QemuVm(VmConfig("demo", vcpus=2, memory_mib=1024), registry)
    record = vm.start()
    why = vm.accel.line() if vm.accel is not None else f"accelerator: {record.accel}"
    console.print(f"guest up: pid {record.pid}; {why}")
    daemon = None
    try:
        files = [f"/root/data/f{i}" for i in range(2)]
        writes = " && ".join(f"head -c {file_size} /dev/urandom > {f}" for f in files)
        guest(vm, f"mkdir -p /root/data && {writes} && cat /root/data/* >/dev/null")
        console.print(f"guest files: 2 x {file_size >> 10} KiB = {2 * file_size >> 10} KiB "
                      f"(one L2 is {l2.size_bytes >> 10} KiB), in the guest's page cache")

        step("unicache OFF: read benchmark, grep and wc without the shim, no daemon")
        off = measure(vm, files, shim=False)

        step("Starting the daemon (--unify l2); its decisions as they happen:")
        log = state / "decisions.jsonl"
        if log.exists():
            log.unlink()
        daemon = subprocess.Popen(
            [str(VENV_BIN / "unicache"), "run", "--unify", "l2", "--interval", "1",
             "--state-dir", str(state), "--connect", "none"],
            stdout=sys.stdout, stderr=sys.stderr,
        )
        time.sleep(3)
        guest(vm, f"LD_PRELOAD={SHIM} python3 -c '{READ_BENCH}' 4 {' '.join(files)} >/dev/null",
              timeout=60)  # warm-up: the guest reports, the host publishes a table
        time.sleep(2)

        step("unicache ON: the same, under the shim, with the daemon's placement")
        on = measure(vm, files, shim=True)
        time.sleep(1.5)
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
        step("Stopping the guest")
        vm.stop()

    table = Table("workload", "unicache off (MB/s)", "unicache on (MB/s)", "on / off",
                  title="guest throughput, measured side by side in this run")
    for name in ("read", "grep", "wc"):
        table.add_row(name, f"{off[name]:.0f}", f"{on[name]:.0f}", f"{on[name] / off[name]:.2f}")
    console.print(table)
    console.print(
        "Honest note: this host's two cores share one 32 MiB L3 and the guest runs under "
        f"{record.accel.upper()} on a nested machine, so both runs are served from the same "
        "L3; what 'on' adds here is the shim's work and its thread migrations (slow under "
        "TCG), not more cache. "
        "The cache effect is shown by the simulator below."
    )

    reads = per_vcpu_reads(log, "demo")
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
            console.print(f"  chunk {entry['file']}:{entry['chunk']} -> unit {entry['unit']} "
                          f"(vCPUs {entry['vcpus']}, "
                          f"{'caching' if entry['caching'] else 'non-caching'})")

    step("What the simulator predicts for the read benchmark on machines with several LLCs")
    for model, sizes in (("opteron-16", "2,8"), ("epyc-2s", "64,256")):
        subprocess.run([str(VENV_BIN / "unicache-sim"), "mfc", "--model", model,
                        "--workload", "read", "--dist", "uniform", "--ws-mb", sizes], check=False)

    leftovers = subprocess.run(["pgrep", "-f", "guest=demo,"], capture_output=True, text=True)
    if leftovers.stdout.strip():
        console.print(f"[red]processes left behind: {leftovers.stdout.split()}[/red]")
        return 1
    console.print("\nall stopped: no QEMU left, the daemon restored every affinity "
                  f"(decision log: {log})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
