"""The real agent process talks to the real host channel over a unix socket."""

from __future__ import annotations

import asyncio
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from unicache.channel import ChannelParams, ChannelServer
from unicache.model import ChunkId, GuestReport, PlacementEntry, PlacementTable, PublishPlacement
from unicache_agent.table_writer import TableWriter

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "guest-agent" / "shim"


def test_agent_reports_shim_counts_and_applies_tables(tmp_path: Path) -> None:
    subprocess.run(["make", "-s", "-C", str(SHIM), "all"], check=True)
    data = tmp_path / "data"
    data.write_bytes(os.urandom(300_000))
    env = {**os.environ, "UNICACHE_TABLE": str(tmp_path / "table"),
           "UNICACHE_COUNTERS": str(tmp_path / "counters"),
           "UNICACHE_REPLICAS": str(tmp_path / "replicas"),
           "PYTHONPATH": str(ROOT / "guest-agent")}
    reports: list[GuestReport] = []

    async def main() -> None:
        server = ChannelServer(tmp_path, params=ChannelParams(report_interval_s=0.2),
                               on_report=reports.append)
        sock = await server.add_vm("vm1")
        agent = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "unicache_agent", "--socket", str(sock), "--duration", "20",
            env=env, stderr=subprocess.PIPE)
        try:
            for _ in range(200):
                if server.is_ready("vm1"):
                    break
                await asyncio.sleep(0.05)
            assert server.is_ready("vm1")
            # a process reading under the shim is counted and reported
            await asyncio.to_thread(
                subprocess.run, ["cat", str(data)], check=True, stdout=subprocess.DEVNULL,
                env={**env, "LD_PRELOAD": str(SHIM / "libunicache.so")})
            for _ in range(100):
                if sum(c.bytes_read for r in reports for c in r.chunks) >= 300_000:
                    break
                await asyncio.sleep(0.05)
            assert sum(c.bytes_read for r in reports for c in r.chunks) == 300_000
            fid = reports[-1].chunks[0].chunk.file_id if reports[-1].chunks else next(
                c.chunk.file_id for r in reports for c in r.chunks)
            table = PlacementTable("vm1", 4, 65536, 4096, (
                PlacementEntry(ChunkId(fid, 0), frozenset({1}), False, 3),
                PlacementEntry(ChunkId(fid, 1), frozenset({0}), True, 0)))
            server.publish(PublishPlacement("vm1", table, "test"))
            for _ in range(100):
                if server.status()[0].applied_version == 4:
                    break
                await asyncio.sleep(0.05)
            assert server.status()[0].applied_version == 4
        finally:
            agent.terminate()
            _, err = await agent.communicate()
            await server.close()
        assert agent.returncode == 0, err.decode()[-2000:]

    asyncio.run(main())
    t = TableWriter(str(tmp_path / "table"))
    version, cs, mrs, entries = t.read_active()
    assert (version, cs, mrs) == (4, 65536, 4096)
    assert {(e.chunk, e.vcpus, e.caching, e.migration_budget) for e in entries} == {
        (0, frozenset({1}), False, 3), (1, frozenset({0}), True, 0)}
    t.close()
    assert (tmp_path / "counters").is_dir()  # the agent made the users' directory


def test_agent_without_host_waits_and_retries(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "guest-agent")}
    res = subprocess.run(
        [sys.executable, "-m", "unicache_agent", "--socket", str(tmp_path / "absent.sock"),
         "--table", str(tmp_path / "t"), "--counters", str(tmp_path / "c"),
         "--duration", "1.5"], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0
    assert res.stderr.count("retrying in") >= 2
    assert "Traceback" not in res.stderr


def test_agent_runs_at_nice_19_so_the_guest_s_work_goes_first(tmp_path: Path) -> None:
    # the niceness the agent's own process has while it runs (read by the agent itself at
    # the end of its run, through the code hook below: no race with a second process)
    probe = ("import atexit, os\n"
             "atexit.register(lambda: print('nice', os.getpriority(os.PRIO_PROCESS, 0)))")
    res = _agent("--socket", str(tmp_path / "absent.sock"), "--table", str(tmp_path / "t"),
                 "--counters", str(tmp_path / "c"), "--duration", "0.2", code=probe)
    assert res.returncode == 0, res.stderr
    assert f"nice {max(19, os.getpriority(os.PRIO_PROCESS, 0))}" in res.stdout


@pytest.mark.parametrize(("args", "sample"), [((), (0, 0)),
                                              (("--open-sample", "262144:3"), (256 * 1024, 3))],
                         ids=["default-every-open", "small-files-sampled"])
def test_the_agents_tables_carry_its_open_sample(tmp_path: Path, args: tuple[str, ...],
                                                 sample: tuple[int, int]) -> None:
    res = _agent("--socket", str(tmp_path / "absent.sock"), "--table", str(tmp_path / "t"),
                 "--counters", str(tmp_path / "c"), "--duration", "0.2", *args)
    assert res.returncode == 0, res.stderr
    data = (tmp_path / "t").read_bytes()
    nbuckets, active = struct.unpack_from("<II", data, 16)
    base = 4096 + (active & 1) * (4096 + 64 * nbuckets)
    # uc_table_buf's sample_bytes (u32) and sample_shift (u8) after its flags
    assert struct.unpack_from("<IB", data, base + 40) == sample


def _agent(*args: str, code: str = "") -> subprocess.CompletedProcess[str]:
    """Run the agent over stdio (no host) with ``args``; ``code`` runs first, in-process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "guest-agent")}
    script = f"import sys\nimport unicache_agent.__main__ as m\n{code}\nsys.exit(m.main())"
    return subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("args", "message"), [
    (("--duration", "soon"), "unicache-agent: argument --duration: invalid float value"),
    (("--duration", "-1"), "unicache-agent: argument --duration: must be 0 or more, not -1"),
    (("--stdio", "--socket", "/x"), "unicache-agent: argument --socket: not allowed with"),
    (("--no-such-flag",), "unicache-agent: unrecognized arguments: --no-such-flag"),
    (("--nice", "20"), "unicache-agent: argument --nice: invalid choice: 20"),
    (("--open-sample", "65536:16"), "unicache-agent: argument --open-sample: takes BYTES:SHIFT"),
], ids=["bad-value", "negative-duration", "exclusive-flags", "unknown-flag", "nice-over-19",
        "sample-shift-over-15"])
def test_agent_bad_flag_is_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    res = _agent(*args)
    assert res.returncode == 2
    assert res.stderr.startswith(message), res.stderr
    assert res.stderr.rstrip().endswith("(see unicache-agent --help)")
    assert len(res.stderr.strip().splitlines()) == 1


def test_agent_unusable_table_or_counters_path_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    table = str(tmp_path / "no" / "dir" / "t")
    res = _agent("--stdio", "--table", table, "--counters", str(tmp_path / "c"),
                 "--duration", "1")
    assert res.returncode == 2
    assert res.stderr.startswith(f"unicache-agent: --table {table}: cannot open {table}: ")
    assert len(res.stderr.strip().splitlines()) == 1
    counters = str(tmp_path / "file" / "c")  # under a regular file
    res = _agent("--stdio", "--table", str(tmp_path / "t"), "--counters", counters,
                 "--duration", "1")
    assert res.returncode == 2
    assert res.stderr.startswith(f"unicache-agent: --counters {counters}: ")
    assert len(res.stderr.strip().splitlines()) == 1


def test_agent_failure_while_running_is_one_line_and_exit_1(tmp_path: Path) -> None:
    # the shared memory fails for a reason that is not the path the user gave (a full
    # /dev/shm): a runtime failure, exit 1
    code = ("import errno\n"
            "from unicache_agent.errors import ShmError\n"
            "def full(*a, **k):\n"
            "    raise ShmError('cannot map the table') from OSError(errno.ENOSPC, 'full')\n"
            "m.TableWriter = full")
    res = _agent("--stdio", "--table", str(tmp_path / "t"), "--counters", str(tmp_path / "c"),
                 "--duration", "1", code=code)
    assert res.returncode == 1
    assert res.stderr == "unicache-agent: cannot map the table: [Errno 28] full\n"


def test_agent_reconnects_after_the_host_restarts(tmp_path: Path) -> None:
    env = {**os.environ, "UNICACHE_TABLE": str(tmp_path / "table"),
           "UNICACHE_COUNTERS": str(tmp_path / "counters"),
           "UNICACHE_REPLICAS": str(tmp_path / "replicas"),
           "PYTHONPATH": str(ROOT / "guest-agent")}

    async def wait_ready(server: ChannelServer) -> bool:
        for _ in range(300):
            if server.is_ready("vm1"):
                return True
            await asyncio.sleep(0.05)
        return False

    async def main() -> None:
        server = ChannelServer(tmp_path)
        sock = await server.add_vm("vm1")
        agent = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "unicache_agent", "--socket", str(sock), "--duration", "30",
            env=env, stderr=subprocess.PIPE)
        said: list[str] = []

        async def agent_says(what: str, times: int) -> bool:
            # the host is ready once it sent its welcome; the agent says so once it read it
            assert agent.stderr is not None
            for _ in range(300):
                if sum(what in line for line in said) >= times:
                    return True
                try:
                    line = await asyncio.wait_for(agent.stderr.readline(), 0.05)
                except TimeoutError:
                    continue
                said.append(line.decode())
            return False

        try:
            assert await wait_ready(server)
            await server.close()  # the host goes away
            await asyncio.sleep(0.3)
            server = ChannelServer(tmp_path)
            await server.add_vm("vm1", sock)  # and comes back on the same socket
            assert await wait_ready(server)
            assert await agent_says("host ready", 2)
        finally:
            agent.terminate()
            _, rest = await agent.communicate()
            await server.close()
        err = "".join(said) + rest.decode()
        assert "host closed the connection" in err
        assert err.count("host ready") == 2

    asyncio.run(main())
