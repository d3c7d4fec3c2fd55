"""QMP: one command per connection through ``qemu.qmp``, a sync facade, replies checked.

:func:`execute` connects to a QEMU's QMP socket, runs one command and disconnects;
:func:`run_sync` runs such a coroutine from sync code, also inside a running event loop
(then in a worker thread). :func:`parse_cpus_fast` checks the ``query-cpus-fast`` reply at
the boundary (QMP reference, "query-cpus-fast").
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from qemu.qmp import QMPClient
from qemu.qmp import QMPError as _QMPError

from unicache.errors import ProtocolError, VmError

_T = TypeVar("_T")


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def worker() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as err:  # re-raised in the caller's thread
            box["error"] = err

    t = threading.Thread(target=worker, name="unicache-qmp")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


async def execute(vm: str, qmp_socket: str, command: str,
                  arguments: Mapping[str, object] | None = None,
                  timeout: float = 10.0) -> object:
    """Run one QMP command (connects, runs, disconnects).

    :param vm: the VM (names the client and the error).
    :param qmp_socket: its QMP socket.
    :param command: e.g. ``query-cpus-fast``.
    :param arguments: its arguments.
    :param timeout: seconds for connect + command.
    :returns: the ``return`` member.
    :raises VmError: when QMP cannot be reached or the command fails.
    """
    client = QMPClient(vm)
    try:
        async with asyncio.timeout(timeout):
            await client.connect(qmp_socket)
            return await client.execute(command, arguments)
    except (_QMPError, OSError, TimeoutError) as err:
        raise VmError(f"QMP {command} failed", vm) from err
    finally:
        # disconnect() re-raises what ended the session: EOFError when QEMU hangs up,
        # OSError, or a QMPError (qemu.qmp's AsyncProtocol.disconnect); the command's own
        # outcome is already decided above
        with contextlib.suppress(_QMPError, EOFError, OSError):
            await client.disconnect()


def parse_cpus_fast(reply: object) -> dict[int, int]:
    """Validate a ``query-cpus-fast`` reply (QMP reference, "query-cpus-fast": a list of
    ``CpuInfoFast`` with ``cpu-index`` and ``thread-id``) into vCPU index -> host thread id.

    :param reply: the ``return`` value.
    :returns: vCPU index -> thread id.
    :raises ProtocolError: kind ``qmp-reply`` when the reply has the wrong shape.
    """
    if not isinstance(reply, list):
        raise ProtocolError("'query-cpus-fast' reply must be a list", "qmp-reply")
    out: dict[int, int] = {}
    for item in reply:
        if not isinstance(item, dict):
            raise ProtocolError("'query-cpus-fast' reply items must be objects", "qmp-reply")
        for key in ("cpu-index", "thread-id"):
            val = item.get(key)
            if not isinstance(val, int) or isinstance(val, bool) or val < 0:
                raise ProtocolError(f"'query-cpus-fast' reply requires '{key}' member",
                                    "qmp-reply")
        out[item["cpu-index"]] = item["thread-id"]
    return out
