"""The agent opened on a character device (a pty standing in for the virtio port)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tty
from pathlib import Path

from unicache.channel import ChannelParams, ChannelServer
from unicache.model import GuestReport

ROOT = Path(__file__).resolve().parents[2]


def test_agent_on_a_device_reaches_the_host_through_a_relay(tmp_path: Path) -> None:
    master, slave = os.openpty()
    tty.setraw(slave)  # a virtio port has no line discipline; neither may the pty
    dev = os.ttyname(slave)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "guest-agent"),
           "UNICACHE_TABLE": str(tmp_path / "t"), "UNICACHE_COUNTERS": str(tmp_path / "c"),
           "UNICACHE_REPLICAS": str(tmp_path / "r")}
    reports: list[GuestReport] = []

    async def main() -> None:
        server = ChannelServer(tmp_path, params=ChannelParams(report_interval_s=0.2),
                               on_report=reports.append)
        sock = await server.add_vm("vm1")
        reader, writer = await asyncio.open_unix_connection(str(sock))  # QEMU's chardev
        loop = asyncio.get_running_loop()
        os.set_blocking(master, False)

        def to_host() -> None:
            with contextlib.suppress(BlockingIOError):
                writer.write(os.read(master, 65536))

        async def to_guest() -> None:
            while data := await reader.read(65536):
                os.write(master, data)

        loop.add_reader(master, to_host)
        relay = asyncio.create_task(to_guest())
        agent = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "unicache_agent", "--device", dev, "--duration", "20",
            env=env, stderr=subprocess.PIPE)
        try:
            for _ in range(200):
                if len(reports) >= 2:
                    break
                await asyncio.sleep(0.05)
            assert server.is_ready("vm1")
            assert len(reports) >= 2 and reports[0].guest_vcpus >= 1
        finally:
            agent.terminate()
            _, err = await agent.communicate()
            loop.remove_reader(master)
            relay.cancel()
            writer.close()
            await server.close()
        assert agent.returncode == 0, err.decode()[-2000:]
        assert "opened " + dev in err.decode()

    try:
        asyncio.run(main())
    finally:
        os.close(master)
        os.close(slave)
