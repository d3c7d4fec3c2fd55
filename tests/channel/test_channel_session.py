"""A malformed, oversized or flooding guest gets an error naming the problem; the host holds."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from unicache.channel import protocol as p
from unicache.channel.session import (
    BYTE_BURST,
    MAX_BYTES_PER_SECOND,
    MAX_PENDING_REPORTS,
    GuestSession,
    Runstate,
)
from unicache.errors import ProtocolError
from unicache.model import ChunkId, PlacementEntry, PlacementTable

HELLO = {"v": 1, "type": "hello", "seq": 0, "agent": "t", "versions": [1],
         "caps": ["report", "placement"], "vcpus": 2, "nodes": [0]}


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def report(seq: int, nchunks: int = 1, **over: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "v": 1, "type": "report", "seq": seq, "interval_s": 1.0, "vcpus": 2, "nodes": [0],
        "chunks": [[f"{i + 1:x}", 0, 4096, 1, 0, [[0, 4096]]] for i in range(nchunks)],
        "health": {"uptime_s": 1.0, "shim_clients": 1, "dropped": 0, "errors": 0}}
    msg.update(over)
    return msg


def ready(now: float = 0.0) -> GuestSession:
    s = GuestSession("vm1")
    s.connected()
    out = s.feed(line(HELLO), now)
    assert s.state is Runstate.READY
    assert json.loads(out.outgoing[0])["type"] == "welcome"
    return s


def error_kinds(out: tuple[bytes, ...]) -> list[str]:
    return [json.loads(x)["kind"] for x in out if json.loads(x.lstrip(b"\xff"))["type"] == "error"]


def test_hello_then_report_reaches_the_model() -> None:
    s = ready()
    res = s.feed(line(report(1, 3)), 0.1)
    assert res.errors == ()
    [rep] = s.drain()
    assert rep.vm == "vm1" and rep.seq == 1 and len(rep.chunks) == 3
    assert rep.chunks[0].chunk == ChunkId(1, 0) and rep.chunks[0].vcpu_bytes == ((0, 4096),)


@pytest.mark.parametrize(
    ("data", "kind", "words"),
    [
        (b"{not json\n", "bad-json", "not JSON"),
        (b"[1, 2]\n", "bad-message", "JSON object"),
        (b'{"v": 1, "type": "teleport"}\n', "unknown-type", "teleport"),
        (b'{"v": 9, "type": "report"}\n', "unsupported-version", "version"),
        (line(report(1, chunks="x")), "bad-field", "chunks"),
        (line(report(1, interval_s=-1)), "bad-field", "interval_s"),
        (line(report(-5)), "bad-field", "seq"),
        (line(report(1, chunks=[["zz", 0, 1, 1, 0, []]])), "bad-field", "file id"),
        (line(report(1, chunks=[["a", 0, 1, 1, 0, [[0, 1], [0, 2]]]])), "bad-field", "twice"),
        (line(report(1, nchunks=p.MAX_ENTRIES_PER_MESSAGE + 1)), "too-many-entries", "limit"),
        (b'{"v": 1, "type": "report", "x": NaN}\n', "bad-json", "JSON"),
        (b"[" * 100000 + b"\n", "bad-json", "JSON"),
        (b'{"v": 1, "type": "hello", "agent": "a", "versions": [7], "caps": [], "vcpus": 1,'
         b' "nodes": []}\n', "unsupported-version", "versions"),
        (b"\xc3\x28\n", "bad-json", "JSON"),
    ],
    ids=["bad-json", "not-object", "unknown-type", "version", "chunks-not-list",
         "negative-interval", "negative-seq", "bad-file-id", "duplicate-vcpu",
         "too-many-chunks", "nan", "deep-nesting", "hello-version", "bad-utf8"],
)
def test_malformed_message_answered_with_named_error(data: bytes, kind: str, words: str) -> None:
    s = ready()
    res = s.feed(data, 1.0)
    assert [e.kind for e in res.errors] == [kind]
    assert words in res.errors[0].error_message
    assert error_kinds(res.outgoing) == [kind]
    assert s.drain() == []
    # and the session still works
    assert s.feed(line(report(2)), 1.1).errors == ()
    assert len(s.drain()) == 1


def test_report_before_hello_is_not_ready() -> None:
    s = GuestSession("vm1")
    s.connected()
    res = s.feed(line(report(1)), 0.0)
    assert [e.kind for e in res.errors] == ["not-ready"]


def test_oversized_line_dropped_without_buffering_it() -> None:
    s = ready()
    big = b'{"v":1,"type":"report","pad":"' + b"x" * (3 * p.MAX_LINE_BYTES)
    kinds: list[str] = []
    for i in range(0, len(big), 4096):  # arrives in pieces, like a socket
        res = s.feed(big[i:i + 4096], 1.0)
        kinds += [e.kind for e in res.errors]
        assert s.framer.buffered <= p.MAX_LINE_BYTES
    res = s.feed(b'"}\n' + line(report(5)), 1.0)
    kinds += [e.kind for e in res.errors]
    assert kinds == ["line-too-long"]
    assert [r.seq for r in s.drain()] == [5]


def test_lines_before_a_sync_byte_in_the_same_read_are_kept() -> None:
    s = GuestSession("vm1")
    s.connected()
    hello_and_ack = line(HELLO) + b"\xff" + line({"v": 1, "type": "sync-ack", "id": 1})
    res = s.feed(hello_and_ack, 0.0)
    assert res.errors == ()
    assert s.state is Runstate.READY


def test_sync_byte_drops_partial_line_and_sync_is_acked() -> None:
    s = ready()
    res = s.feed(b'{"v":1,"type":"rep\xff' + line({"v": 1, "type": "sync", "id": 42}), 1.0)
    assert res.errors == ()
    assert res.outgoing == (b"\xff" + p.encode({"type": "sync-ack", "id": 42}),)


def test_flood_of_messages_is_rate_limited_and_errors_are_limited() -> None:
    s = ready()
    flood = line(report(1)) * 5000
    res = s.feed(flood, 1.0)
    kinds = [e.kind for e in res.errors]
    assert kinds.count("rate-limited") == 1  # noted once per feed
    # only RATE_BURST reports accepted at once, the queue bounded
    assert s.stats.reports <= p.RATE_BURST
    assert len(s.drain()) <= MAX_PENDING_REPORTS
    # error replies bounded per second whatever the guest does
    sent = 0
    for i in range(100):
        sent += len(error_kinds(s.feed(b"garbage\n", 2.0 + i * 0.001).outgoing))
    assert sent <= p.MAX_ERRORS_PER_SECOND
    assert s.stats.errors_suppressed > 0


@pytest.mark.parametrize("unit", [b"\n", b"x\n", b"\xff", b"\xff\n", b"\xffx"],
                         ids=["newlines", "short-lines", "sync-bytes", "sync-newline",
                              "sync-text"])
def test_flood_of_tiny_lines_costs_little_cpu(unit: bytes) -> None:
    import time

    s = ready()
    data = unit * (65536 // len(unit))
    t0 = time.process_time()
    for i in range(16):  # 1 MiB: what the byte budget lets through in a second
        s.feed(data, 1.0 + i * 1e-4)
    # dropped lines are skipped with C scans: about 5 ms here, 350 ms before (per line work)
    assert time.process_time() - t0 < 0.15
    assert s.framer.buffered <= p.MAX_LINE_BYTES


def test_byte_flood_pauses_reading() -> None:
    s = ready()
    s.feed(b"\n" * (BYTE_BURST + MAX_BYTES_PER_SECOND), 1.0)
    assert s.throttle_s(1.0) == pytest.approx(1.0, rel=0.01)
    assert s.throttle_s(2.5) == 0.0


def test_state_per_vm_is_bounded() -> None:
    s = ready()
    t = 0.0
    big = line(report(1, nchunks=p.MAX_ENTRIES_PER_MESSAGE))
    kinds: list[str] = []
    for _ in range(MAX_PENDING_REPORTS + 3):
        t += 1.0  # slow enough not to be rate limited
        kinds += [e.kind for e in s.feed(big, t).errors]
        assert s.pending_chunks <= p.MAX_CHUNKS_PER_VM
    assert kinds == ["state-full"] * 3
    assert s.stats.dropped_reports == 3
    assert len(s.drain()) == MAX_PENDING_REPORTS


def test_memory_stays_bounded_under_garbage() -> None:
    s = ready()
    junk = (b"x" * 70000 + b"\n" + b"{" * 5000 + b"\n" + line(report(1, nchunks=1000))) * 4
    tracemalloc.start()
    for i in range(200):
        s.feed(junk, 1.0 + i * 0.01)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 64 * 1024 * 1024
    assert s.framer.buffered <= p.MAX_LINE_BYTES
    assert s.pending_chunks <= p.MAX_CHUNKS_PER_VM


def test_table_sent_after_hello_in_parts() -> None:
    s = GuestSession("vm1")
    s.connected()
    entries = tuple(PlacementEntry(ChunkId(i + 1, 0), frozenset({i % 2}), i % 3 != 0, 4)
                    for i in range(2500))
    table = PlacementTable("vm1", 7, 262144, 65536, entries)
    assert s.set_table(table) == []  # not ready yet: kept
    out = s.feed(line(HELLO), 0.0).outgoing
    msgs = [json.loads(x) for x in out]
    assert [m["type"] for m in msgs] == ["welcome", "placement", "placement", "placement"]
    assert [m["part"] for m in msgs[1:]] == [0, 1, 2]
    assert sum(len(m["entries"]) for m in msgs[1:]) == 2500
    assert all(len(x) <= p.MAX_LINE_BYTES for x in out)


def test_table_over_the_limit_is_refused() -> None:
    entries = tuple(PlacementEntry(ChunkId(i + 1, 0), frozenset({0}))
                    for i in range(p.MAX_TABLE_ENTRIES + 1))
    with pytest.raises(ProtocolError, match="limit"):
        p.encode_placement(PlacementTable("vm1", 1, 262144, 0, entries))


def test_reconnection_restarts_handshake_but_keeps_stats() -> None:
    s = ready()
    s.feed(line(report(1)), 1.0)
    first = s.connected()
    assert json.loads(first[0])["type"] == "sync"
    assert s.state is Runstate.AWAITING_HELLO
    assert s.stats.reports == 1


NUMA_HELLO = {**HELLO, "caps": ["report", "placement", "colors", "replicas"], "nodes": [0, 1]}


def test_report_carries_home_node_node_reads_memory_and_modified_files() -> None:
    s = ready()
    msg = report(1, chunks=[["a", 0, 4096, 3, 0, [[0, 4096]], 1, [[1, 2], [0, 1]]],
                            ["b", 2, 10, 1, 0, [], -1],
                            ["c", 1, 10, 1, 0, []]],
                 files=[["d", 5, 0], ["e", 1, 2]], node_memory=[[1, 10, 20], [0, 5, 8]])
    out = s.feed(line(msg), 1.0)
    assert out.errors == ()
    (rep,) = s.drain()
    assert [(c.home_node, c.node_reads) for c in rep.chunks] == [
        (1, ((0, 1), (1, 2))), (-1, ()), (-1, ())]
    assert [(m.node, m.free_bytes, m.total_bytes) for m in rep.node_memory] == [
        (0, 5, 8), (1, 10, 20)]
    assert rep.modified_files == frozenset({0xE})


@pytest.mark.parametrize(("over", "kind", "words"), [
    ({"chunks": [["a", 0, 1, 1, 0, [], p.MAX_NODES]]}, "bad-field", "home_node"),
    ({"chunks": [["a", 0, 1, 1, 0, [], -2]]}, "bad-field", "home_node"),
    ({"chunks": [["a", 0, 1, 1, 0, [], 0, [[0, 1], [0, 2]]]]}, "bad-field", "each node once"),
    ({"chunks": [["a", 0, 1, 1, 0, [], 0, [[p.MAX_NODES, 1]]]]}, "bad-field", "node_reads"),
    ({"chunks": [["a", 0, 1, 1, 0, [], 0, [[0, p.MAX_COUNTER + 1]]]]}, "bad-field",
     "node_reads"),
    ({"chunks": [["a", 0, 1, 1, 0, [], 0, [[i, 1] for i in range(p.MAX_NODES + 1)]]]},
     "too-many-entries", "node_reads"),
    ({"chunks": [["a", 0, 1, 1, 0, [], 0, [], 9]]}, "bad-field", "report chunk must be"),
    ({"node_memory": [[0, 9, 8]]}, "bad-field", "free <= total"),
    ({"node_memory": [[0, 1, 8], [0, 1, 8]]}, "bad-field", "each node once"),
    ({"node_memory": [[p.MAX_NODES, 1, 8]]}, "bad-field", "node_memory"),
    ({"node_memory": [[0, 1, p.MAX_COUNTER + 1]]}, "bad-field", "node_memory"),
    ({"node_memory": [[i, 1, 2] for i in range(p.MAX_NODES + 1)]}, "too-many-entries",
     "node_memory"),
    ({"node_memory": {"0": 1}}, "bad-field", "node_memory"),
], ids=["home-too-big", "home-below-minus-one", "node-twice", "node-too-big", "reads-too-big",
        "too-many-node-reads", "nine-items", "free-over-total", "memory-node-twice",
        "memory-node-too-big", "memory-too-big", "too-many-memory-nodes", "memory-not-list"])
def test_numa_fields_out_of_bounds_are_named_errors(over: dict[str, Any], kind: str,
                                                    words: str) -> None:
    s = ready()
    out = s.feed(line(report(1, **over)), 1.0)
    assert [e.kind for e in out.errors] == [kind]
    assert words in out.errors[0].error_message
    assert s.drain() == []


def _numa_table() -> PlacementTable:
    return PlacementTable("vm1", 3, 262144, 65536, (
        PlacementEntry(ChunkId(1, 0), frozenset({1}), True, 4, color_node=1),
        PlacementEntry(ChunkId(1, 1), frozenset(), True, 0, replica_nodes=frozenset({1, 0})),
        PlacementEntry(ChunkId(2, 0), frozenset({0}), False, 2)))


@pytest.mark.parametrize(("caps", "want"), [
    (["report", "placement"], None),
    (["report", "placement", "colors"], [[1, []], [-1, []], [-1, []]]),
    (["report", "placement", "replicas"], [[-1, []], [-1, [0, 1]], [-1, []]]),
    (["report", "placement", "colors", "replicas"], [[1, []], [-1, [0, 1]], [-1, []]]),
], ids=["no-caps-five-items", "colors-only", "replicas-only", "both"])
def test_color_and_replica_fields_only_for_guests_with_the_caps(caps: list[str],
                                                                want: Any) -> None:
    s = GuestSession("vm1")
    s.connected()
    s.set_table(_numa_table())
    out = s.feed(line({**NUMA_HELLO, "caps": caps}), 0.0).outgoing
    welcome, placement = (json.loads(x) for x in out)
    assert set(welcome["caps"]) == set(caps)
    if want is None:
        assert [len(e) for e in placement["entries"]] == [5, 5, 5]
    else:
        assert [e[5:] for e in placement["entries"]] == want
        assert [e[:5] for e in placement["entries"]] == [
            ["1", 0, [1], True, 4], ["1", 1, [], True, 0], ["2", 0, [0], False, 2]]


def test_table_is_re_encoded_when_a_new_hello_changes_the_caps() -> None:
    s = GuestSession("vm1")
    s.connected()
    first = s.feed(line(NUMA_HELLO), 0.0).outgoing
    assert s.set_table(_numa_table())  # ready: sent at once, with the fields
    assert len(json.loads(s.set_table(_numa_table())[0])["entries"][0]) == 7
    assert json.loads(first[0])["type"] == "welcome"
    s.connected()
    out = s.feed(line(HELLO), 1.0).outgoing  # an older agent reconnects: no caps
    assert [len(e) for e in json.loads(out[1])["entries"]] == [5, 5, 5]
    s.connected()
    out = s.feed(line(NUMA_HELLO), 2.0).outgoing
    assert [len(e) for e in json.loads(out[1])["entries"]] == [7, 7, 7]


def test_a_guest_that_booted_again_gets_no_table_of_its_old_boot() -> None:
    boot_a = {**HELLO, "id_space": "00112233445566aa"}
    boot_b = {**HELLO, "id_space": "99887766554433bb"}
    s = GuestSession("vm1")
    s.connected()
    s.feed(line(boot_a), 0.0)
    entries = (PlacementEntry(ChunkId(1, 0), frozenset({0})),)
    table = PlacementTable("vm1", 3, 262144, 65536, entries)
    assert s.set_table(table)
    s.feed(line(report(1)), 0.5)
    [rep] = s.drain()
    assert rep.id_space == "00112233445566aa"
    s.connected()  # the agent restarted in the same boot: its table again
    assert [json.loads(x)["type"] for x in s.feed(line(boot_a), 1.0).outgoing] == [
        "welcome", "placement"]
    s.feed(line(report(2)), 1.5)  # not drained: the old boot's, when the guest reboots
    s.connected()
    assert [json.loads(x)["type"] for x in s.feed(line(boot_b), 2.0).outgoing] == ["welcome"]
    assert s.drain() == []
    s.feed(line(report(1)), 2.5)
    [rep] = s.drain()
    assert rep.id_space == "99887766554433bb"


@pytest.mark.parametrize("id_space", ["00112233445566AA", "0011", 17, "g" * 16, None])
def test_a_hello_with_a_bad_id_space_is_a_named_error(id_space: object) -> None:
    s = GuestSession("vm1")
    s.connected()
    out = s.feed(line({**HELLO, "id_space": id_space}), 0.0).outgoing
    assert error_kinds(out) == ["bad-field"] and s.state is Runstate.AWAITING_HELLO


def test_a_table_of_another_boot_is_kept_from_the_guest() -> None:
    s = GuestSession("vm1")
    s.connected()
    s.feed(line({**HELLO, "id_space": "99887766554433bb"}), 0.0)
    entries = (PlacementEntry(ChunkId(1, 0), frozenset({0})),)
    old = PlacementTable("vm1", 3, 262144, 65536, entries, id_space="00112233445566aa")
    assert s.set_table(old) == []  # restored after a restart, built for the old boot
    s.connected()
    out = s.feed(line({**HELLO, "id_space": "99887766554433bb"}), 1.0).outgoing
    assert [json.loads(x)["type"] for x in out] == ["welcome"]
    new = PlacementTable("vm1", 4, 262144, 65536, entries, id_space="99887766554433bb")
    assert [json.loads(x)["type"] for x in s.set_table(new)] == ["placement"]
    unknown = PlacementTable("vm1", 5, 262144, 65536, entries)  # no id space: sent
    assert s.set_table(unknown)
