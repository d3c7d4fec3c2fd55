"""Generate the example observation traces under examples/ (deterministic: fixed seeds).

Run: .venv/bin/python tools/gen_traces.py   (rewrites examples/*.jsonl)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FILE_SIZE = 256 * 1024  # the MFC paper's 256 KiB files (§6.1)
CYCLES_PER_TICK = 2_000_000_000  # one second at 2 GHz
READ_RATE = 1.5e9  # bytes a reading vCPU reads per busy second in the file-reader traces
READS_PER_TICK = 2000  # files each vCPU reads per tick (a recorded rate: placement cannot move it)


def _zipf_weights(n: int) -> list[float]:
    # "the nth most common element occurs 1/n times as often as the most frequent" (§6.1)
    return [1.0 / (i + 1) for i in range(n)]


def file_reader_trace(dist: str, seed: int) -> list[dict[str, object]]:
    """Two VMs of 8 vCPUs each reading 24 files of 256 KiB each on opteron-16.

    Each VM's 6 MiB exceed what one thread reaches without migrating (its chip's 2 MiB L3
    and its core's 512 KiB L2), and both together fit the 16 MiB on all four chips: the
    case SCU is for (MFC Figure 3, 4-8 MiB). A vCPU reads 2,000 files a second
    (about 500 MiB/s, a read benchmark's pace), so a migration costs little beside the
    DRAM reads it saves. With Zipf popularity the hottest files fit one chip and the cost
    model predicts less gain.
    """
    rng = random.Random(seed)
    vms = [f"vm{i}" for i in range(2)]
    vcpus = 8
    files_per_vm = 24
    lines: list[dict[str, object]] = [
        {"type": "header", "version": 1, "model": "opteron-16", "unify": "llc", "interval_s": 1.0}
    ]
    for vm in vms:
        lines.append({"type": "vm", "tick": 0, "name": vm, "vcpus": vcpus, "memory_mib": 4096})
    weights = _zipf_weights(files_per_vm) if dist == "zipf" else [1.0] * files_per_vm
    for tick in range(12):
        for v, vm in enumerate(vms):
            per_chunk: dict[int, dict[int, int]] = {}
            for vcpu in range(vcpus):
                reads = READS_PER_TICK
                for f in rng.choices(range(files_per_vm), weights, k=reads):
                    per_chunk.setdefault(f, {}).setdefault(vcpu, 0)
                    per_chunk[f][vcpu] += FILE_SIZE
                bytes_read = sum(b.get(vcpu, 0) for b in per_chunk.values())
                lines.append(
                    {
                        "type": "sample",
                        "tick": tick,
                        "vm": vm,
                        "vcpu": vcpu,
                        "cycles": CYCLES_PER_TICK,
                        "instructions": CYCLES_PER_TICK // 2,
                        "llc_references": bytes_read // 64,
                        "llc_misses": bytes_read // 64 // 3,
                        # a recorded trace does not answer to placement: every vCPU
                        # reads at one rate per busy second, placed or not
                        "busy": round(bytes_read / READ_RATE, 3),
                    }
                )
            chunks = [
                {
                    "file": f"{(v + 1) << 32 | f:x}",
                    "chunk": 0,
                    "bytes": sum(b.values()),
                    "reads": sum(b.values()) // FILE_SIZE,
                    "writes": 0,
                    "vcpu_bytes": sorted([c, n] for c, n in b.items()),
                }
                for f, b in sorted(per_chunk.items())
            ]
            lines.append({"type": "report", "tick": tick, "vm": vm, "seq": tick, "chunks": chunks})
    return lines


def cachebuster_spinloop_trace(seed: int) -> list[dict[str, object]]:
    """OBS paper's mix on xeon-5300-quad: 4 cachebuster and 4 spinloop vCPUs on 4 cores.

    One VM with 8 vCPUs. For the first ticks all weigh the same, so OBS-X alternates
    them over the two units (even vCPUs in unit 0); at tick 3 the even vCPUs turn into
    cachebusters, all in unit 0, so the periodic rebalance has work to do.
    """
    rng = random.Random(seed)
    lines: list[dict[str, object]] = [
        {"type": "header", "version": 1, "model": "xeon-5300-quad", "unify": "llc"},
        {"type": "vm", "tick": 0, "name": "mix", "vcpus": 8, "memory_mib": 4096},
    ]
    for tick in range(21):
        for vcpu in range(8):
            heavy = vcpu % 2 == 0 and tick >= 3
            if tick < 3:
                misses = 2000
            else:
                misses = rng.randint(9_000_000, 11_000_000) if heavy else rng.randint(1000, 3000)
            lines.append(
                {
                    "type": "sample",
                    "tick": tick,
                    "vm": "mix",
                    "vcpu": vcpu,
                    "cycles": 1_160_000_000,
                    "instructions": 900_000_000,
                    "llc_references": misses * 2,
                    "llc_misses": misses,
                    "busy": 0.5,
                }
            )
    return lines


def colors_replicas_trace() -> list[dict[str, object]]:
    """One VM on opteron-242-2node: a backup stream gets colors, a hot file gets replicas.

    The VM has a vCPU on each of the host's two nodes (guest nodes 0 and 1) and two
    colored memory-only nodes (2: host colors 0-1, 3: colors 2-3 of the 16 colors of the
    1 MiB 16-way L2, a quarter of it). vCPU 0 streams a large file once (weak locality);
    its co-runner on vCPU 1 misses half of its LLC references while the stream runs
    uncolored (tick 0) and an eighth once it is colored, so SRM's step-aside predicts a
    gain and its watch keeps the colors (docs/coloring.md, step 7). vCPU 1 reads a hot
    file whose page cache is on node 0 three times a tick (NCC replicates it on node 1);
    a write at tick 4 and a shim-less writer at tick 6 drop the replicas again.
    """
    chunk = 512 * 1024  # half of the 1 MiB L2
    lines: list[dict[str, object]] = [
        {"type": "header", "version": 1, "model": "opteron-242-2node", "unify": "llc"},
        {
            "type": "vm", "tick": 0, "name": "web", "vcpus": 2, "memory_mib": 1792,
            "nodes": [
                {"node": 0, "vcpus": "0", "memory_mib": 768},
                {"node": 1, "vcpus": "1", "memory_mib": 768},
                {"node": 2, "vcpus": "", "memory_mib": 128, "colors": "0-1"},
                {"node": 3, "vcpus": "", "memory_mib": 128, "colors": "2-3"},
            ],
        },
    ]
    backup, hot = 0xBAC0, 0x40
    stream_lines = 4 * chunk // 64
    for tick in range(8):
        # (LLC references, misses): the streamer's are its own lines and a little more
        counters = [(stream_lines + 7_000, stream_lines + 1_000),
                    (60_000, 30_000 if tick == 0 else 7_500)]
        for vcpu, (refs, misses) in enumerate(counters):
            lines.append({"type": "sample", "tick": tick, "vm": "web", "vcpu": vcpu,
                          "cycles": 1_600_000_000, "instructions": 800_000_000,
                          "llc_references": refs, "llc_misses": misses, "busy": 0.8})
        chunks: list[dict[str, object]] = [
            {"file": f"{backup:x}", "chunk": tick * 4 + i, "bytes": chunk, "reads": 1,
             "writes": 0, "vcpu_bytes": [[0, chunk]], "home_node": 2 + (i // 2) % 2,
             "node_reads": [[0, 1]]}
            for i in range(4)
        ]
        for i in range(2):
            written = tick == 4 and i == 1
            chunks.append({"file": f"{hot:x}", "chunk": i, "bytes": 3 * chunk, "reads": 3,
                           "writes": int(written), "vcpu_bytes": [[1, 3 * chunk]],
                           "home_node": 0, "node_reads": [[1, 3]]})
        report: dict[str, object] = {
            "type": "report", "tick": tick, "vm": "web", "seq": tick, "chunks": chunks,
            "node_memory": [[n, 600 << 20, 768 << 20] for n in (0, 1)],
        }
        if tick == 6:
            report["modified_files"] = [f"{hot:x}"]
        lines.append(report)
    return lines


def main() -> None:
    """Write every example trace."""
    EXAMPLES.mkdir(exist_ok=True)
    outputs = {
        "opteron16-uniform.jsonl": file_reader_trace("uniform", seed=1),
        "opteron16-zipf.jsonl": file_reader_trace("zipf", seed=2),
        "xeon5300-cachebuster-spinloop.jsonl": cachebuster_spinloop_trace(seed=3),
        "opteron242-colors-replicas.jsonl": colors_replicas_trace(),
    }
    for name, lines in outputs.items():
        with (EXAMPLES / name).open("w") as out:
            for line in lines:
                out.write(json.dumps(line, separators=(",", ":")) + "\n")
        print(f"wrote examples/{name} ({len(lines)} lines)")


if __name__ == "__main__":
    main()
