"""Regenerate the example observation traces under examples/ from the simulator.

Run: ``make examples`` (or ``.venv/bin/python tools/gen_traces.py [NAME ...]``); it
rewrites ``examples/*.jsonl`` and prints what each replay decided. Every run is
deterministic (fixed seeds), so the files change only when the simulator or the policies
do. docs/trace.md says what each trace shows;
``tests/cli/test_example_traces.py`` checks that its replay still does.

The MFC and OBS traces are recorded from the simulator's runs of the daemon's loop
(``unicache-sim mfc`` and ``unicache-sim obs``): every round's observation, as the
simulated host built it, is written as the trace's tick
(``unicache.trace.TraceWriter``), so ``unicache replay`` feeds the policies what they
saw in the simulator; each written trace is replayed here and must decide as many
actions and refusals of each kind as the simulated daemon did. The colors-and-replicas
trace is a scripted guest on ``opteron-242-2node`` (see :func:`colors_replicas_trace`).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from unicache.host.replay import ReplayHost
from unicache.loop import RoundResult, run_rounds_sync
from unicache.model import (
    ChunkAccess,
    ChunkId,
    CounterSample,
    CounterSource,
    GuestNode,
    GuestReport,
    NodeMemory,
    Observation,
    Vcpu,
    VcpuId,
    Vm,
)
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.topology import Topology, Unify
from unicache.topology.sysfs import load_topology
from unicache.trace import TraceWriter, read_trace
from unicache_sim.engine.config import from_topology
from unicache_sim.experiments.mfc.read import run_baseline
from unicache_sim.experiments.mfc.spec import MIB, MfcSpec
from unicache_sim.experiments.obs.sched import ObsSpec, run_obs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: the MFC traces' working set: 32 of the paper's 256 KiB files, about half the on-chip caches of
#: opteron-16 (4 x 2 MiB L3 + 16 x 512 KiB L2) and four times one chip's L3 (MFC Figure 3)
MFC_WS_MIB = 8


class _Recorder:
    """Writes every round's observation at its own tick (a policy's periods count ticks, so
    the replay decides on the ticks the simulated daemon decided on) and counts what the
    simulated daemon decided (printed, to compare with the replay)."""

    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer
        self.ticks = 0
        self.decided: Counter[str] = Counter()

    def __call__(self, rnd: RoundResult) -> None:
        self.add(rnd.observation)
        self.decided.update(_decided(rnd))

    def add(self, obs: Observation) -> None:
        self.writer.add(obs)
        self.ticks += 1


def _decided(rnd: RoundResult) -> Counter[str]:
    """A round's actions and refusals, by kind."""
    return Counter([*(type(a).__name__ for a in rnd.decision.actions),
                    *(r.kind for r in rnd.decision.refusals)])


def replayed(path: Path) -> Counter[str]:
    """What ``unicache replay`` decides on a trace, by kind (its host, policy and loop)."""
    trace = read_trace(path)
    topo = load_topology(trace.header.model, None)
    policy = UnicachePolicy(topo, Unify(trace.header.unify or "llc"))
    host = ReplayHost(trace, frozenset(c.cpu for c in topo.cpus))
    done: Counter[str] = Counter()
    for rnd in run_rounds_sync(host, policy, RoundState()):
        done.update(_decided(rnd))
    return done


def mfc_trace(dist: str, seed: int) -> _Recorder:
    """``unicache-sim mfc --dist DIST --ws-mb 8 --threads 1 --seed SEED`` on opteron-16.

    One VM of 16 vCPUs (one per host CPU) with one reader thread that preads 256 KiB files
    whole, picked uniformly or with Zipf popularity (MFC §6.1), 8 MiB of them. The
    recorded rounds are the live baseline's: its warm-up until the policy's standing has
    settled and the measured rounds after it.
    """
    topo = load_topology("opteron-16", None)
    spec = MfcSpec(dist=dist, threads=1, seed=seed)
    rec = _Recorder(TraceWriter(topo.name, spec.unify, spec.timing.round_s))
    run_baseline("unicache", topo, from_topology(topo), spec, MFC_WS_MIB * MIB, on_round=rec)
    return rec


def cachebuster_spinloop_trace(seed: int) -> _Recorder:
    """``unicache-sim obs --scenario migration --seeds SEED`` on xeon-5300-quad, OBS only.

    Eight one-vCPU VMs, four running cachebuster and four spinloop (the observations
    paper's mix), shared by CFS timeslices on the 4 cores of two LLC groups; every 4
    rounds a cachebuster VM and a spinloop VM swap programs, which OBS-X's rebalance
    answers and OBS-L's pairing of heavy and light vCPUs on a core follows.
    """
    topo = load_topology("xeon-5300-quad", None)
    spec = ObsSpec(("cachebuster",) * 4 + ("spinloop",) * 4, None, rounds=24, swap_every=4,
                   seed=seed)
    rec = _Recorder(TraceWriter(topo.name, "llc", spec.round_ms / 1e3))
    run_obs(topo, spec, "obs", on_round=rec)
    return rec


def colors_replicas_trace(topo: Topology) -> _Recorder:
    """One VM on opteron-242-2node: a backup stream gets colors, a hot file gets replicas.

    Scripted, not simulated: the simulator's SRM runs need two CPUs sharing an LLC, which
    this machine (one core per node, each with its own L2) does not have. The VM has a
    vCPU on each of the host's two nodes (guest nodes 0 and 1) and two colored memory-only
    nodes (2: host colors 0-1, 3: colors 2-3 of the 16 colors of the 1 MiB 16-way L2, a
    quarter of it). vCPU 0 streams a large file once (weak locality); its co-runner on
    vCPU 1 misses half of its LLC references while the stream runs uncolored (tick 0) and
    an eighth once it is colored, so SRM's step-aside predicts a gain and its watch keeps
    the colors (docs/coloring.md, step 7). vCPU 1 reads a hot file whose page cache is on
    node 0 three times a tick (NCC replicates it on node 1); a write at tick 4 and a
    shim-less writer at tick 6 drop the replicas again.
    """
    chunk = 512 * 1024  # half of the 1 MiB L2
    everywhere = frozenset(c.cpu for c in topo.cpus)
    vm = Vm(
        "web",
        tuple(Vcpu(VcpuId("web", i), None, everywhere) for i in range(2)),
        1792 * MIB,
        (
            GuestNode(0, frozenset({0}), 768 * MIB),
            GuestNode(1, frozenset({1}), 768 * MIB),
            GuestNode(2, frozenset(), 128 * MIB, frozenset({0, 1})),
            GuestNode(3, frozenset(), 128 * MIB, frozenset({2, 3})),
        ),
    )
    backup, hot = 0xBAC0, 0x40
    stream_lines = 4 * chunk // 64
    rec = _Recorder(TraceWriter(topo.name, "llc"))
    for tick in range(8):
        # (LLC references, misses): the streamer's are its own lines and a little more
        counters = [(stream_lines + 7_000, stream_lines + 1_000),
                    (60_000, 30_000 if tick == 0 else 7_500)]
        samples = tuple(
            CounterSample(VcpuId("web", vcpu), CounterSource.TRACE, cycles=1_600_000_000,
                          instructions=800_000_000, llc_references=refs, llc_misses=misses,
                          busy=0.8)
            for vcpu, (refs, misses) in enumerate(counters)
        )
        chunks = [
            ChunkAccess(ChunkId(backup, tick * 4 + i), chunk, 1, 0, ((0, chunk),),
                        home_node=2 + (i // 2) % 2, node_reads=((0, 1),))
            for i in range(4)
        ]
        chunks += [
            ChunkAccess(ChunkId(hot, i), 3 * chunk, 3, int(tick == 4 and i == 1),
                        ((1, 3 * chunk),), home_node=0, node_reads=((1, 3),))
            for i in range(2)
        ]
        report = GuestReport(
            "web", tick, 1.0, tuple(chunks),
            node_memory=tuple(NodeMemory(n, 600 * MIB, 768 * MIB) for n in (0, 1)),
            modified_files=frozenset({hot}) if tick == 6 else frozenset(),
        )
        rec.add(Observation(tick, (vm,), samples, (report,)))
    return rec


#: every example trace: file name -> how it is made
TRACES: dict[str, Callable[[], _Recorder]] = {
    "opteron16-uniform.jsonl": lambda: mfc_trace("uniform", seed=1),
    "opteron16-zipf.jsonl": lambda: mfc_trace("zipf", seed=1),
    "xeon5300-cachebuster-spinloop.jsonl": lambda: cachebuster_spinloop_trace(seed=1),
    "opteron242-colors-replicas.jsonl": lambda: colors_replicas_trace(
        load_topology("opteron-242-2node", None)
    ),
}


def main(names: list[str]) -> None:
    """Write the named example traces (default: every one)."""
    EXAMPLES.mkdir(exist_ok=True)
    for name in names or list(TRACES):
        if name not in TRACES:
            raise SystemExit(f"no example trace {name!r} (known: {', '.join(TRACES)})")
        rec = TRACES[name]()
        path = EXAMPLES / name
        rec.writer.write(path)
        again = replayed(path)
        decided = ", ".join(f"{k} {n}" for k, n in sorted(again.items()))
        print(f"wrote examples/{name}: {rec.ticks} ticks, {path.stat().st_size} bytes; "
              f"its replay decides {decided}")
        if rec.decided and again != rec.decided:
            # a recorded trace replays what the simulated daemon decided, or it records less
            raise SystemExit(f"examples/{name}: the replay decides {dict(again)}, the "
                             f"simulated daemon decided {dict(rec.decided)}")

if __name__ == "__main__":
    main(sys.argv[1:])
