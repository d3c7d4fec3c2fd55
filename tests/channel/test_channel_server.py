"""The asyncio channel over real unix sockets: handshake, errors, floods, reconnection."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from unicache.channel import ChannelServer
from unicache.channel import protocol as p
from unicache.channel.server import UNSAFE_SOCKET, dial_guest_socket
from unicache.errors import ConfigError, UnicacheError
from unicache.model import ChunkId, GuestReport, PlacementEntry, PlacementTable, PublishPlacement

HELLO = (b'{"v":1,"type":"hello","seq":0,"agent":"raw","versions":[1],"caps":["report"],'
         b'"vcpus":2,"nodes":[0]}\n')
REPORT = (b'{"v":1,"type":"report","seq":1,"interval_s":1,"vcpus":2,"nodes":[0],'
          b'"chunks":[["ab",3,100,1,0,[[1,100]]]]}\n')


def run(fn: Callable[[ChannelServer, Path], Awaitable[None]], tmp_path: Path,
        **kw: Any) -> None:
    async def main() -> None:
        server = ChannelServer(tmp_path, **kw)
        sock = await server.add_vm("vm1")
        try:
            await asyncio.wait_for(fn(server, sock), 20)
        finally:
            await server.close()

    asyncio.run(main())


async def read_msgs(reader: asyncio.StreamReader, n: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    while len(out) < n:
        raw = await reader.readline()
        assert raw, "server closed the connection"
        out.append(json.loads(raw.lstrip(b"\xff")))
    return out


def test_handshake_report_and_table(tmp_path: Path) -> None:
    got: list[GuestReport] = []

    async def body(server: ChannelServer, sock: Path) -> None:
        r, w = await asyncio.open_unix_connection(str(sock))
        assert (await read_msgs(r, 1))[0]["type"] == "sync"
        w.write(HELLO + REPORT)
        welcome = (await read_msgs(r, 1))[0]
        assert welcome["type"] == "welcome" and welcome["caps"] == ["report"]
        table = PlacementTable("vm1", 3, 262144, 65536,
                               (PlacementEntry(ChunkId(0xAB, 3), frozenset({1}), True, 2),))
        assert server.publish(PublishPlacement("vm1", table, "test"))
        [placement] = await read_msgs(r, 1)
        assert placement["entries"] == [["ab", 3, [1], True, 2]]
        w.write(b'{"v":1,"type":"applied","version":3,"entries":1}\n')
        await w.drain()
        for _ in range(100):
            if server.status()[0].applied_version == 3:
                break
            await asyncio.sleep(0.01)
        assert server.status()[0].applied_version == 3
        assert [(x.vm, x.chunks[0].chunk) for x in got] == [("vm1", ChunkId(0xAB, 3))]
        w.close()

    run(body, tmp_path, on_report=got.append)


def test_status_counts_the_bytes_each_way_as_the_guest_sees_them(tmp_path: Path) -> None:
    async def body(server: ChannelServer, sock: Path) -> None:
        r, w = await asyncio.open_unix_connection(str(sock))
        received = await r.readline()  # sync
        sent = HELLO + REPORT
        w.write(sent)
        received += await r.readline()  # welcome
        table = PlacementTable("vm1", 3, 262144, 65536,
                               (PlacementEntry(ChunkId(0xAB, 3), frozenset({1}), True, 2),))
        server.publish(PublishPlacement("vm1", table, "test"))
        received += await r.readline()
        await w.drain()
        for _ in range(100):
            if server.status()[0].bytes_in == len(sent):
                break
            await asyncio.sleep(0.01)
        (st,) = server.status()
        assert (st.bytes_in, st.bytes_out) == (len(sent), len(received))
        w.close()

    run(body, tmp_path)


def test_a_dry_run_publish_returns_the_lines_it_would_send_and_sends_and_keeps_nothing(
    tmp_path: Path,
) -> None:
    async def body(server: ChannelServer, sock: Path) -> None:
        table = PlacementTable("vm1", 3, 262144, 65536,
                               (PlacementEntry(ChunkId(0xAB, 3), frozenset({1}), True, 2),))
        action = PublishPlacement("vm1", table, "test")
        assert server.publish(action, dry_run=True) == ()  # no agent: nothing would go
        r, w = await asyncio.open_unix_connection(str(sock))
        assert (await read_msgs(r, 1))[0]["type"] == "sync"
        w.write(HELLO)
        assert (await read_msgs(r, 1))[0]["type"] == "welcome"
        lines = server.publish(action, dry_run=True)
        assert [json.loads(line)["entries"] for line in lines] == [[["ab", 3, [1], True, 2]]]
        # nothing was sent, and the session keeps no table to send after a reconnect
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(r.readline(), 0.3)
        w.close()
        await asyncio.sleep(0.05)
        r2, w2 = await asyncio.open_unix_connection(str(sock))
        assert (await read_msgs(r2, 1))[0]["type"] == "sync"
        w2.write(HELLO)
        assert (await read_msgs(r2, 1))[0]["type"] == "welcome"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(r2.readline(), 0.3)
        # the real path sends exactly the lines the dry run returned
        assert server.publish(action) == lines
        assert await r2.readline() == lines[0]
        w2.close()

    run(body, tmp_path)


def test_numa_guest_gets_color_and_replica_fields_and_its_report_reaches_the_model(
        tmp_path: Path) -> None:
    got: list[GuestReport] = []
    hello = HELLO.replace(b'"caps":["report"]', b'"caps":["report","colors","replicas"]')
    report = (b'{"v":1,"type":"report","seq":1,"interval_s":1,"vcpus":2,"nodes":[0,1],'
              b'"chunks":[["ab",3,100,2,0,[[1,100]],1,[[0,2]]]],"files":[["cd",0,3]],'
              b'"node_memory":[[0,5,9],[1,7,9]]}\n')

    async def body(server: ChannelServer, sock: Path) -> None:
        r, w = await asyncio.open_unix_connection(str(sock))
        assert (await read_msgs(r, 1))[0]["type"] == "sync"
        w.write(hello + report)
        welcome = (await read_msgs(r, 1))[0]
        assert welcome["caps"] == ["report", "colors", "replicas"]
        table = PlacementTable("vm1", 4, 262144, 65536, (
            PlacementEntry(ChunkId(0xAB, 3), frozenset(), True, 0, color_node=1,
                           replica_nodes=frozenset({0})),))
        assert server.publish(PublishPlacement("vm1", table, "test"))
        [placement] = await read_msgs(r, 1)
        assert placement["entries"] == [["ab", 3, [], True, 0, 1, [0]]]
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.01)
        [rep] = got
        assert (rep.chunks[0].home_node, rep.chunks[0].node_reads) == (1, ((0, 2),))
        assert [m.free_bytes for m in rep.node_memory] == [5, 7]
        assert rep.modified_files == frozenset({0xCD})
        w.close()

    run(body, tmp_path, on_report=got.append)


def test_garbage_oversize_and_flood_get_named_errors_and_server_survives(
        tmp_path: Path) -> None:
    async def body(server: ChannelServer, sock: Path) -> None:
        r, w = await asyncio.open_unix_connection(str(sock))
        await read_msgs(r, 1)
        w.write(b"\x00\x01garbage\n")
        assert (await read_msgs(r, 1))[0]["kind"] == "bad-json"
        await asyncio.sleep(0.6)  # error replies are limited per second
        w.write(b"A" * (p.MAX_LINE_BYTES + 10) + b"\n")
        err = (await read_msgs(r, 1))[0]
        assert err["kind"] == "line-too-long" and str(p.MAX_LINE_BYTES) in str(err["message"])
        await asyncio.sleep(0.6)
        w.write(HELLO + REPORT * 500)  # a flood
        msgs = await read_msgs(r, 2)
        assert [m["type"] for m in msgs] == ["welcome", "error"]
        assert msgs[1]["kind"] == "rate-limited"
        await w.drain()
        await asyncio.sleep(0.1)
        reports = server.drain_reports()
        assert 0 < len(reports) <= p.RATE_BURST
        st = server.status()[0]
        assert dict(st.errors)["rate-limited"] >= 1 and dict(st.errors)["line-too-long"] == 1
        # still serving: once the flooding connection ends, a fresh one completes its
        # handshake
        w.close()
        await asyncio.sleep(0.1)
        r2, w2 = await asyncio.open_unix_connection(str(sock))
        await read_msgs(r2, 1)
        w2.write(HELLO)
        assert (await read_msgs(r2, 1))[0]["type"] == "welcome"
        assert server.is_ready("vm1")
        w2.close()

    run(body, tmp_path)


def test_a_second_connection_is_refused_while_one_is_live_and_a_reconnect_gets_the_table(
    tmp_path: Path,
) -> None:
    async def body(server: ChannelServer, sock: Path) -> None:
        table = PlacementTable("vm1", 9, 262144, 0,
                               (PlacementEntry(ChunkId(5, 0), frozenset({0})),))
        assert not server.publish(PublishPlacement("vm1", table, "before connect"))
        r1, w1 = await asyncio.open_unix_connection(str(sock))
        await read_msgs(r1, 1)
        # issue #12: a second client cannot take the VM's channel over
        r2, w2 = await asyncio.open_unix_connection(str(sock))
        assert await r2.read() == b""
        (st,) = server.status()
        assert dict(st.errors)["second-connection"] == 1
        # once the first one ends, the VM's agent reconnects and gets its table again
        w1.close()
        assert await r1.read() == b""
        await asyncio.sleep(0.05)
        r3, w3 = await asyncio.open_unix_connection(str(sock))
        await read_msgs(r3, 1)
        w3.write(HELLO)
        msgs = await read_msgs(r3, 2)
        assert [m["type"] for m in msgs] == ["welcome", "placement"]
        assert msgs[1]["version"] == 9
        w2.close()
        w3.close()

    run(body, tmp_path)


def test_a_socket_path_that_is_not_a_socket_is_never_replaced(tmp_path: Path) -> None:
    victim = tmp_path / "vm1.sock"
    victim.write_text("important")

    async def main() -> None:
        server = ChannelServer(tmp_path)
        with pytest.raises(ConfigError, match="not a socket"):
            await server.add_vm("vm1")
        await server.close()

    asyncio.run(main())
    assert victim.read_text() == "important"


def test_a_socket_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)

    async def main() -> None:
        server = ChannelServer(shared)
        with pytest.raises(ConfigError, match="writable by no one else"):
            await server.add_vm("vm1")
        await server.close()

    asyncio.run(main())


def test_publish_sends_a_table_and_refuses_an_unknown_vm_or_a_bad_table(tmp_path: Path) -> None:
    # the one way tables go out (the daemon's LiveHost calls publish per action)
    async def body(server: ChannelServer, sock: Path) -> None:
        ok = PublishPlacement("vm1", PlacementTable("vm1", 1, 262144, 0, ()), "ok")
        unknown = PublishPlacement("vm9", PlacementTable("vm9", 1, 262144, 0, ()), "no vm")
        bad = PublishPlacement("vm1", PlacementTable("vm1", 2, 1000, 0, ()), "bad chunk")
        server.publish(ok)
        with pytest.raises(UnicacheError, match="no channel"):
            server.publish(unknown)
        with pytest.raises(UnicacheError, match="chunk_size"):
            server.publish(bad)

    run(body, tmp_path)


def test_connect_mode_dials_qemu_and_redials_after_a_drop(tmp_path: Path) -> None:
    async def main() -> None:
        conns: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.Queue())

        async def qemu(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await conns.put((r, w))

        qsock = tmp_path / "qemu.sock"  # QEMU listens here (server=on)
        fake = await asyncio.start_unix_server(qemu, path=str(qsock))
        server = ChannelServer(tmp_path)
        await server.connect_vm("vm1", qsock, retry_s=0.05)
        try:
            r, w = await asyncio.wait_for(conns.get(), 5)
            assert (await read_msgs(r, 1))[0]["type"] == "sync"
            w.write(HELLO)
            assert (await read_msgs(r, 1))[0]["type"] == "welcome"
            assert server.is_ready("vm1")
            w.close()  # QEMU drops the connection (e.g. the guest rebooted)
            r2, w2 = await asyncio.wait_for(conns.get(), 5)
            assert (await read_msgs(r2, 1))[0]["type"] == "sync"
            w2.close()
        finally:
            await server.close()
            fake.close()
        assert qsock.exists()  # QEMU's socket is left alone

    asyncio.run(main())


@pytest.mark.parametrize("planted", ["link", "other-owner", "file"])
def test_dialing_refuses_anything_but_a_socket_of_qemus_user(tmp_path: Path,
                                                             planted: str) -> None:
    # issue #12: QEMU owns the directory of its bind-mode socket and may put anything at
    # the path; root dials only a socket of QEMU's own user, and never follows a link
    async def main() -> None:
        dialed: list[int] = []

        async def victim(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            dialed.append(1)  # a socket root must never reach (another daemon's)
            w.close()

        other = tmp_path / "victim.sock"
        fake = await asyncio.start_unix_server(victim, path=str(other))
        qsock = tmp_path / "qemu.sock"
        qemu_uid = os.geteuid()
        if planted == "link":
            qsock.symlink_to(other)
        elif planted == "other-owner":
            qsock = other
            qemu_uid = os.geteuid() + 1  # the socket is not QEMU's user's
        else:
            qsock.write_text("not a socket")
        server = ChannelServer(tmp_path)
        await server.connect_vm("vm1", qsock, retry_s=0.02, owner_uid=qemu_uid)
        try:
            await asyncio.sleep(0.2)
            (status,) = server.status()
            assert dict(status.errors).get(UNSAFE_SOCKET, 0) >= 2
            assert not status.connected
        finally:
            await server.close()
            fake.close()
        assert dialed == []

    asyncio.run(main())


def test_dial_guest_socket_connects_to_the_inode_it_checked(tmp_path: Path) -> None:
    import socket as socketlib

    qsock = tmp_path / "qemu.sock"
    listener = socketlib.socket(socketlib.AF_UNIX)
    listener.bind(str(qsock))
    listener.listen()
    try:
        conn = dial_guest_socket(qsock, os.geteuid())
        peer, _ = listener.accept()
        conn.setblocking(True)
        conn.sendall(b"x")
        assert peer.recv(1) == b"x"
        conn.close()
        peer.close()
    finally:
        listener.close()
