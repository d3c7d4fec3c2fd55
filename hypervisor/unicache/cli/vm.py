"""``unicache vm``: start, stop, list (and exec in) guests run by unicache's own QEMU.

The guests boot the image ``make image`` builds (docs/images.md); the registry of running VMs
is the state directory (env ``UNICACHE_STATE_DIR``, default ``/run/unicache/vms``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from unicache.cpulist import format_list
from unicache.errors import ConfigError, UnicacheError
from unicache.host.qemu import (
    QemuVm,
    VmConfig,
    VmRecord,
    check_name,
    list_vms,
    parse_numa,
    read_record,
    state_dir,
)

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Start, stop and list VMs run by unicache's own QEMU.")
_out = Console(width=None if sys.stdout.isatty() else 200)
_err = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def _vm_json(rec: VmRecord, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**rec.to_json(), **(extra or {})}


def _numa_text(rec: VmRecord) -> str:
    if not rec.numa:
        return "-"
    return " ".join(f"{n.node}:{format_list(n.cpus) or '-'}:{n.memory_mib}M"
                    + (f"@{format_list(n.colors)}({n.backing})" if n.colors else "")
                    for n in rec.numa)


@app.command()
def start(
    name: Annotated[str, typer.Argument(help="The VM's name.")],
    vcpus: Annotated[int, typer.Option("--vcpus", help="Number of vCPUs.")] = 2,
    memory: Annotated[int, typer.Option("--memory", help="Guest memory in MiB.")] = 1024,
    numa: Annotated[str | None, typer.Option(
        "--numa", help="Guest NUMA nodes CPULIST:MIB[@COLORS] joined by '/', '-' for a "
                       "memory-only node, e.g. 0-1:768/-:256. @COLORS builds the node from "
                       "host pages of those LLC page colors, e.g. 0-1:768/-:256@0-15: with "
                       "the patched QEMU (make qemu) through memory-backend-colored, else "
                       "from 2 MiB hugepages (guest colors equal host colors within each "
                       "2 MiB page; reserved as root and given back at stop). With a colored "
                       "node every node needs an even MiB count.")] = None,
    accel: Annotated[str | None, typer.Option(
        "--accel", help="auto (probe, default), kvm or tcg (env UNICACHE_ACCEL).")] = None,
    agent_socket: Annotated[Path | None, typer.Option(
        "--agent-socket", help="Agent channel socket (default <state>/<name>/agent.sock).")] = None,
    agent_listen: Annotated[bool, typer.Option(
        "--agent-listen", help="QEMU listens on the agent socket (default: it connects to "
                               "the host channel's socket).")] = False,
    image: Annotated[Path | None, typer.Option(
        "--image", help="Guest image directory (default build/images/debian12).")] = None,
    wait: Annotated[bool, typer.Option(
        "--wait/--no-wait", help="Wait until the guest has booted.")] = True,
    boot_timeout: Annotated[float, typer.Option(
        "--boot-timeout", help="Seconds to wait for the guest to boot.")] = 180.0,
    as_json: JsonOpt = False,
) -> None:
    """Start a VM from the built guest image (`make image`) and wait until it has booted."""
    nodes = parse_numa(numa, vcpus, memory) if numa else ()
    vm = QemuVm(VmConfig(check_name(name), vcpus, memory, nodes, accel, agent_socket,
                         agent_listen, image),
                progress=lambda msg: _err.print(f"vm {name}: {msg}", highlight=False,
                                                soft_wrap=True))
    t0 = time.monotonic()
    rec = vm.start()
    choice = vm.accel
    if choice is not None:
        _err.print(f"vm {name}: {choice.line()}", highlight=False, soft_wrap=True)
    boot_s = None
    if wait:
        try:
            vm.wait_for_boot(boot_timeout)
        except UnicacheError:
            vm.stop(timeout=5.0)
            raise
        boot_s = round(time.monotonic() - t0, 2)
    if as_json:
        extra = {"accel_reason": choice.reason if choice else None, "boot_s": boot_s}
        print(json.dumps(_vm_json(rec, extra), indent=1))
        return
    booted = f", booted in {boot_s:.1f} s" if boot_s is not None else " (booting)"
    _out.print(f"vm {name}: pid {rec.pid}, {rec.vcpus} vCPUs, {rec.memory_mib} MiB, "
               f"accel {rec.accel}{booted}", highlight=False)
    _out.print(f"  agent socket {rec.agent_socket}  qmp {rec.qmp_socket}", highlight=False)
    _out.print(f"  console {rec.console_log}", highlight=False)


@app.command()
def stop(
    name: Annotated[str | None, typer.Argument(help="The VM to stop.")] = None,
    all_vms: Annotated[bool, typer.Option("--all", help="Stop every registered VM.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Skip the clean guest power-off (QMP quit, then signals).")] = False,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Seconds for the clean power-off.")] = 15.0,
    as_json: JsonOpt = False,
) -> None:
    """Stop a VM (clean power-off, then QMP quit, SIGTERM, SIGKILL); no process is left."""
    if (name is None) == (not all_vms):
        raise ConfigError("give either a VM name or --all")
    st = state_dir()
    if all_vms:
        names = [r.name for r in list_vms(st)]
    else:
        assert name is not None
        check_name(name)
        if read_record(st / f"{name}.json") is None:
            raise ConfigError(f"no VM named {name} (see `unicache vm list`)")
        names = [name]
    results = []
    for n in names:
        how = QemuVm(VmConfig(n), st).stop(timeout=timeout, force=force)
        results.append({"name": n, "stopped": how})
    if as_json:
        print(json.dumps(results, indent=1))
        return
    if not results:
        _out.print("no VMs running", highlight=False)
    for r in results:
        _out.print(f"vm {r['name']}: stopped ({r['stopped']})", highlight=False)


@app.command("list")
def list_cmd(as_json: JsonOpt = False) -> None:
    """List the running VMs (records of exited QEMUs are dropped)."""
    recs = list_vms()
    if as_json:
        print(json.dumps([_vm_json(r) for r in recs], indent=1))
        return
    if not recs:
        _out.print(f"no VMs running (registry {state_dir()})", highlight=False)
        return
    table = Table("name", "pid", "vcpus", "memory", "accel", "numa", "agent socket",
                  "up", title=f"VMs ({state_dir()})")
    now = time.time()
    for r in recs:
        table.add_row(r.name, str(r.pid), str(r.vcpus), f"{r.memory_mib} MiB", r.accel,
                      _numa_text(r), r.agent_socket, f"{now - r.started:.0f} s")
    _out.print(table)


@app.command("exec")
def exec_cmd(
    name: Annotated[str, typer.Argument(help="The VM.")],
    argv: Annotated[list[str], typer.Argument(help="The command (after --).")],
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds the command may run.")] = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """Run a command in the guest through the demo/test command runner; exits with its code."""
    vm = QemuVm.attach(name)
    res = vm.run_in_guest(argv, timeout=timeout)
    if as_json:
        print(json.dumps({"argv": list(res.argv), "exit": res.exit_code, "stdout": res.stdout,
                          "stderr": res.stderr, "truncated": res.truncated,
                          "timed_out": res.timed_out, "duration_s": res.duration_s,
                          "error": res.error}, indent=1))
    else:
        sys.stdout.write(res.stdout)
        sys.stderr.write(res.stderr)
        if res.error:
            sys.stderr.write(f"unicache: {res.error}\n")
        if res.timed_out:
            sys.stderr.write(f"unicache: timed out after {timeout:.0f} s\n")
    sys.stdout.flush()
    # SystemExit, not typer.Exit: the main CLI runs click with standalone_mode=False, which
    # turns typer.Exit into a return value and would lose the code
    raise SystemExit(res.exit_code if 0 <= res.exit_code < 256 else 1)
