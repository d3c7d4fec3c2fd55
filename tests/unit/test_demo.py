"""The pure helpers of ``make demo`` (tools/demo_checks.py): the checks it makes and the
note it derives from the host. The demo itself boots a guest and runs as ``make demo``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.topologies import TOPO_CORE_I7_860, TOPO_OPTERON_16

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unicache_demo_checks",
                                                  ROOT / "tools" / "demo_checks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _proc(root: Path, pid: int, ppid: int, start: int, state: str = "S",
          comm: str = "python3") -> None:
    (root / str(pid)).mkdir()
    rest = [state, str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 30
    (root / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")


def test_leftovers_are_the_recorded_processes_still_running_and_every_live_descendant(
    demo: ModuleType, tmp_path: Path
) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "self").mkdir()  # not a pid: skipped
    _proc(proc, 1, 0, 1, comm="init")
    _proc(proc, 100, 1, 50, comm="python3 tools/demo.py")  # the demo
    _proc(proc, 101, 100, 60, comm="CPU 0/TCG) (x")  # a child, its name full of parentheses
    _proc(proc, 102, 101, 61)  # a grandchild
    _proc(proc, 103, 100, 62, state="Z")  # a zombie has ended
    _proc(proc, 200, 1, 7, comm="qemu-system-x86")  # recorded, reparented to init
    _proc(proc, 201, 1, 10)  # a recorded pid reused by another process
    _proc(proc, 202, 1, 11)  # someone else's
    started = [demo.Started(200, 7, "QEMU"), demo.Started(201, 9, "daemon"),
               demo.Started(300, 5, "gone")]
    assert demo.leftover_processes(started, 100, proc) == [
        (101, "a process the demo started (pid 101)"),
        (102, "a process the demo started (pid 102)"),
        (200, "QEMU (pid 200)"),
    ]
    assert demo.leftover_processes([], 202, proc) == []


def test_nothing_is_left_when_every_process_ended(demo: ModuleType, tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    _proc(proc, 100, 1, 50)
    _proc(proc, 101, 100, 60, state="Z")
    assert demo.leftover_processes([demo.Started(101, 60, "daemon")], 100, proc) == []


@pytest.mark.parametrize(("pages", "share"), [
    ({0: 300, 2: 100, 3: 100}, 0.4),
    ({0: 512}, 0.0),
    ({2: 7}, 1.0),
    ({}, 0.0),
], ids=["part", "none", "all", "nothing-cached"])
def test_colored_share_counts_pages_on_the_colored_nodes(
    demo: ModuleType, pages: dict[int, int], share: float
) -> None:
    assert demo.colored_share(pages, (2, 3)) == pytest.approx(share)


def test_the_colored_floor_fails_late_colors_and_passes_colors_from_mid_stream(
    demo: ModuleType,
) -> None:
    # the demo's 12 MiB stream is 3072 pages: colors that reach only its last eighth (they
    # arrive at the end) fail; colors from the middle on (3 s into its 6 s) pass
    assert demo.colored_share({0: 2688, 2: 384}, (2, 3)) < demo.COLORED_FLOOR
    assert demo.colored_share({0: 1536, 2: 768, 3: 768}, (2, 3)) >= demo.COLORED_FLOOR


def test_always_place_note_says_what_this_host_lacks(demo: ModuleType) -> None:
    note = demo.always_place_note(
        TOPO_CORE_I7_860, "tcg", "kvm probe: no /dev/kvm",
        (False, "hardware perf counters not supported by this CPU (perf_event_open: No such "
                "file or directory); using task-clock"))
    llc = TOPO_CORE_I7_860.llc
    units = len(TOPO_CORE_I7_860.units(demo.Unify.L2))
    assert f"{units} L2 units share one {llc.size_bytes >> 20} MiB L{llc.level}" in note
    assert "under TCG (kvm probe: no /dev/kvm)" in note
    assert "no LLC counters (hardware perf counters not supported by this CPU" in note
    assert "using task-clock" not in note  # the probe's first clause only


def test_always_place_note_on_a_host_that_lacks_nothing(demo: ModuleType) -> None:
    note = demo.always_place_note(TOPO_OPTERON_16, "kvm", "probe booted",
                                  (True, "hardware perf counters available"))
    assert "several LLC groups, a KVM guest and LLC counters" in note
    assert "TCG" not in note and "share one" not in note
    # each lack alone is named alone
    assert "share one" not in demo.always_place_note(TOPO_OPTERON_16, "tcg", "r", (True, ""))
    only_tcg = demo.always_place_note(TOPO_OPTERON_16, "tcg", "probe timed out", (True, ""))
    assert "under TCG (probe timed out)" in only_tcg and "no LLC counters" not in only_tcg


@pytest.mark.parametrize(
    ("store", "replicated", "mappings", "ok"),
    [
        ({"node1": {"files": 4, "bytes": 4 * 266240}}, 4, 8, True),
        ({"node1": {"files": 3, "bytes": 3 * 266240}}, 4, 6, True),  # one asked for by none
        ({"node1": {"files": 4, "bytes": 8 * 266240}}, 4, 8, False),  # two copies' bytes
        ({"node1": {"files": 4, "bytes": 4 * 266240}}, 4, 5, False),  # one process unserved
        ({"node1": {"files": 0, "bytes": 0}}, 4, 0, False),
        ({}, 4, 8, False),
    ],
    ids=["one-copy-two-processes", "chunk-never-read", "double-bytes", "process-unserved",
         "no-files", "no-store"])
def test_shared_replica_check(demo: ModuleType, store: dict[str, dict[str, int]],
                              replicated: int, mappings: int, ok: bool) -> None:
    why = demo.shared_replica_failure(store, 1, replicated, mappings, 2, 266240)
    assert (why is None) == ok, why


def test_the_replica_check_counts_only_the_hot_files_replicas(demo: ModuleType) -> None:
    # node 1 also holds two replicas of a chunk read earlier in the demo (file 0xab)
    sizes = {f"{0x902f00aba48855ea:016x}.{i}.262144.{i + 7}": 266240 for i in range(4)}
    sizes |= {f"{0xab:016x}.0.262144.1": 266240, f"{0xab:016x}.1.262144.2": 266240}
    store = {"node1": {"files": 6, "bytes": 6 * 266240, "sizes": sizes}}
    hot = demo.hot_file_replicas(store, {0x902f00aba48855ea})
    assert hot == {"node1": {"files": 4, "bytes": 4 * 266240}}
    assert demo.shared_replica_failure(hot, 1, 4, 8, 2, 266240) is None
    assert demo.shared_replica_failure(store, 1, 4, 8, 2, 266240) is not None
