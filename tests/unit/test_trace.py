"""Observation traces: malformed lines are skipped with their line number."""

from __future__ import annotations

from pathlib import Path

import pytest
from unicache.errors import TraceError
from unicache.model import CounterSample, GuestReport
from unicache.trace import MAX_LINE_BYTES, VmStart, read_trace

GOOD = [
    '{"type":"header","version":1,"model":"opteron-16"}',
    '{"type":"vm","tick":0,"name":"a","vcpus":2}',
    '{"type":"sample","tick":0,"vm":"a","vcpu":0,"cycles":100,"llc_misses":5,"busy":0.5}',
    '{"type":"report","tick":0,"vm":"a","chunks":[{"file":"ff","chunk":1,"bytes":10,'
    '"reads":1,"vcpu_bytes":[[0,10]]}]}',
]


def test_good_trace_parses_into_typed_events(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(GOOD) + "\n")
    trace = read_trace(path)
    assert trace.header.model == "opteron-16"
    kinds = [type(e) for e in trace.ticks[0]]
    assert kinds == [VmStart, CounterSample, GuestReport]
    assert not trace.skipped


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("{not json", "Expecting"),
        ("[1,2]", "not a JSON object"),
        ('{"type":"vm","tick":0,"name":"a","vcpus":0}', "vcpus 0 out of range"),
        ('{"type":"sample","tick":-1,"vm":"a","vcpu":0}', "'tick' must not be negative"),
        ('{"type":"sample","tick":0,"vm":"a","vcpu":0,"busy":7}', "busy 7"),
        ('{"type":"report","tick":0,"vm":"a","chunks":[{"file":"zz","chunk":0,"bytes":1,'
         '"reads":1}]}', "invalid literal"),
        ('{"type":"report","tick":0,"vm":"a","chunks":[{"file":"1ffffffffffffffff","chunk":0,'
         '"bytes":1,"reads":1}]}', "64-bit"),
        ('{"type":"teleport","tick":0}', "unknown type"),
        ('{"type":"vm","tick":0,"name":"a","vcpus":1,"nodes":[{"node":0,"vcpus":"3"}]}',
         "does not exist"),
        ('{"type":"report","tick":0,"vm":"a","chunks":[{"file":"1","chunk":0,"bytes":1,'
         '"reads":1,"home_node":99}]}', "home_node"),
        ('{"type":"report","tick":0,"vm":"a","chunks":[],"node_memory":[[0,1]]}',
         "node_memory"),
        ('{"type":"header","version":9}', "trace version 9"),
    ],
    ids=["json", "array", "vcpus", "negative", "busy", "hex", "file-id-range", "type",
         "node-vcpu", "home-node", "node-memory", "version"],
)
def test_malformed_line_is_skipped_with_its_number(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([*GOOD, line, GOOD[2]]) + "\n")
    trace = read_trace(path)
    assert [n for n, _ in trace.skipped] == [5]
    assert why in trace.skipped[0][1]
    assert len(trace.ticks[0]) == 4  # the line after the bad one still counts


def test_guest_nodes_colors_and_node_reads_parse(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"type":"vm","tick":0,"name":"a","vcpus":2,"nodes":[{"node":0,"vcpus":"0-1",'
        '"memory_mib":64},{"node":1,"memory_mib":32,"colors":"0-7"}]}\n'
        '{"type":"report","tick":0,"vm":"a","modified_files":["ff"],"node_memory":[[1,5,9]],'
        '"chunks":[{"file":"1","chunk":2,"bytes":1,"reads":3,"home_node":1,'
        '"node_reads":[[0,3]]}]}\n'
    )
    trace = read_trace(path)
    assert not trace.skipped
    start, report = trace.ticks[0]
    assert isinstance(start, VmStart) and isinstance(report, GuestReport)
    assert [(n.node, n.vcpus, n.memory_bytes >> 20, n.colors) for n in start.nodes] == [
        (0, frozenset({0, 1}), 64, frozenset()), (1, frozenset(), 32, frozenset(range(8)))
    ]
    assert report.chunks[0].home_node == 1 and report.chunks[0].node_reads == ((0, 3),)
    assert report.modified_files == {0xFF} and report.node_memory[0].free_bytes == 5


def test_over_long_line_is_skipped_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"x" * (MAX_LINE_BYTES * 2) + b"\n" + GOOD[1].encode() + b"\n")
    trace = read_trace(path)
    assert trace.skipped[0][0] == 1 and "longer than" in trace.skipped[0][1]
    assert isinstance(trace.ticks[0][0], VmStart)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read trace"):
        read_trace(tmp_path / "absent.jsonl")


def test_an_observation_written_as_a_trace_reads_back_the_same(tmp_path: Path) -> None:
    # the simulator's rounds become example traces this way (tools/gen_traces.py)
    from unicache.model import (
        ChunkAccess,
        ChunkId,
        CounterSource,
        GuestNode,
        NodeMemory,
        Observation,
        Vcpu,
        VcpuId,
        Vm,
    )
    from unicache.trace import TraceWriter, VmStop

    nodes = (GuestNode(0, frozenset({0, 1}), 64 << 20),
             GuestNode(1, frozenset(), 16 << 20, frozenset({2, 3})))
    vm = Vm("a", tuple(Vcpu(VcpuId("a", i), None, frozenset({i})) for i in range(2)), 80 << 20,
            nodes)
    sample = CounterSample(VcpuId("a", 1), CounterSource.SIMULATED, cycles=10,
                           llc_references=4, llc_misses=2, level_misses=(9, 4, 2), busy=0.25)
    report = GuestReport(
        "a", 3, 0.5,
        (ChunkAccess(ChunkId(0xFF, 2), 100, 2, 1, ((0, 60), (1, 40)), home_node=1,
                     node_reads=((0, 2),)),),
        guest_nodes=(0,),
        node_memory=(NodeMemory(0, 1 << 20, 64 << 20),),
        modified_files=frozenset({0xAB}),
    )
    writer = TraceWriter("opteron-16", "l2", 0.5)
    writer.add(Observation(5, (vm,), (sample,), (report,)))
    writer.add(Observation(6, (vm,)))  # no second vm line: it did not change
    writer.add(Observation(7, ()))
    path = tmp_path / "t.jsonl"
    writer.write(path)
    trace = read_trace(path)
    assert not trace.skipped
    assert (trace.header.model, trace.header.unify, trace.header.interval_s) == (
        "opteron-16", "l2", 0.5
    )
    assert trace.ticks[5] == [VmStart("a", 2, 80 << 20, nodes), sample, report]
    assert 6 not in trace.ticks
    assert trace.ticks[7] == [VmStop("a")]
