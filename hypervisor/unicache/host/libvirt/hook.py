"""The libvirt ``qemu`` hook: install, remove, and the placement it applies to a started domain.

libvirt runs ``/etc/libvirt/hooks/qemu DOMAIN OPERATION SUB-OPERATION EXTRA`` with the
domain XML on stdin (https://libvirt.org/hooks.html). Two constraints shape the hook:

* a hook must not call back into libvirt (libvirtd waits for it: deadlock), and only
  the ``migrate``/``restore`` operations may hand back a rewritten XML. So the hook
  cannot pin during ``prepare``/``start``; at ``started`` it spawns a detached process
  that waits for the start job to end and then applies ``unicache place``'s placement
  through the libvirt API (:func:`unicache.host.libvirt.placement.apply_live`): vCPU and
  emulator pins and the memory nodes, live and in the persistent definition, so that the
  domain's XML says what was pinned, and the placement in its metadata, so that the next
  start keeps it (no oscillation);
* libvirtd looks for hook scripts when it starts: after ``install-hook`` restart it.

At ``prepare`` the hook creates the placeholder socket of the unicache agent channel if
it is missing (libvirt refuses to start a domain whose ``mode='connect'`` path does not
exist; QEMU then reconnects until the daemon listens).

``install-hook`` keeps a hook that was there before as ``qemu.unicache-orig`` and calls it
first (same arguments, same stdin, its exit status wins); ``remove-hook`` puts it back.
A domain with its own ``<vcpupin>`` is left as configured; one unicache placed (its
metadata says so) keeps its placement. A domain that does not fit (capacity) is left
unpinned, with the refusal in ``hook.jsonl``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache.cpulist import format_list
from unicache.errors import ConfigError, PolicyRefusal, UnicacheError
from unicache.policy.place.options import PlaceOptions
from unicache.policy.place.types import VmRequest
from unicache.policy.place.vm import place_vm
from unicache.topology import Unify
from unicache.topology.sysfs import load_topology

log = logging.getLogger(__name__)

#: where libvirt looks for hook scripts on Debian, Fedora and RHEL
DEFAULT_HOOKS_DIR = Path("/etc/libvirt/hooks")
#: the line that marks a hook script as unicache's
MARKER = "# unicache libvirt hook"
#: the name a previous hook is kept under while unicache's is installed
BACKUP_NAME = "qemu.unicache-orig"
#: seconds the background process waits for the domain's start job to finish
START_WAIT_S = 60.0

_SCRIPT = """#!/bin/sh
{marker} (installed by `unicache install-hook`; `unicache remove-hook` removes it
# and puts back the hook that was here before, kept meanwhile as {backup}).
# libvirt: https://libvirt.org/hooks.html. A hook must not call back into libvirt, so
# at 'started' unicache.hooks.libvirt_qemu spawns a detached process that pins the domain.
UNICACHE_PYTHON={python}
UNICACHE_HOOK_URI={uri}
UNICACHE_HOOK_UNIFY={unify}
UNICACHE_HOOK_STATE_DIR={state_dir}
UNICACHE_HOOK_CONFIG={config}
export UNICACHE_HOOK_URI UNICACHE_HOOK_UNIFY UNICACHE_HOOK_STATE_DIR UNICACHE_HOOK_CONFIG
ORIG="$(dirname "$0")/{backup}"
if [ -x "$ORIG" ]; then
    input=$(cat; echo x)
    input=${{input%x}}
    printf '%s' "$input" | "$ORIG" "$@" || exit $?
    case "$2" in
        prepare|started) printf '%s' "$input" |
            "$UNICACHE_PYTHON" -m unicache.hooks.libvirt_qemu "$@" ;;
    esac
    exit 0
fi
case "$2" in
    prepare|started) exec "$UNICACHE_PYTHON" -m unicache.hooks.libvirt_qemu "$@" ;;
esac
cat >/dev/null
exit 0
"""


@dataclass(frozen=True, slots=True)
class HookConfig:
    """What the installed hook applies.

    :param uri: libvirt URI the background process connects to.
    :param unify: the cache unit level for the placement.
    :param state_dir: the daemon's state directory (loads in status.json; hook.jsonl).
    :param config: the daemon's TOML config, whose ``[place]`` table sets capacity and
        the profile (``None``: the defaults).
    """

    uri: str = "qemu:///system"
    unify: Unify = Unify.LLC
    state_dir: Path = Path("/run/unicache")
    config: Path | None = None

    @classmethod
    def from_env(cls) -> HookConfig:
        """The config the installed script exports."""
        config = os.environ.get("UNICACHE_HOOK_CONFIG", "")
        return cls(
            os.environ.get("UNICACHE_HOOK_URI", "qemu:///system"),
            Unify(os.environ.get("UNICACHE_HOOK_UNIFY", "llc")),
            Path(os.environ.get("UNICACHE_HOOK_STATE_DIR", "/run/unicache")),
            Path(config) if config else None,
        )


def hook_script(config: HookConfig, python: str = sys.executable) -> str:
    """The text of the hook script.

    :param config: what it applies.
    :param python: the interpreter that has unicache installed.
    """
    return _SCRIPT.format(
        marker=MARKER,
        backup=BACKUP_NAME,
        python=shlex.quote(python),
        uri=shlex.quote(config.uri),
        unify=shlex.quote(str(config.unify)),
        state_dir=shlex.quote(str(config.state_dir)),
        config=shlex.quote(str(config.config or "")),
    )


def is_ours(path: Path) -> bool:
    """Whether ``path`` is a hook unicache installed."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    return MARKER in head


@dataclass(frozen=True, slots=True)
class HookChange:
    """What install/remove did.

    :param path: the hook script.
    :param action: ``installed``, ``updated``, ``removed``, ``not-installed``.
    :param backup: the previous hook kept (install) or put back (remove), if any.
    :param note: one line for the operator.
    """

    path: Path
    action: str
    backup: Path | None
    note: str


def install_hook(
    config: HookConfig, hooks_dir: Path = DEFAULT_HOOKS_DIR, python: str = sys.executable
) -> HookChange:
    """Install ``hooks_dir/qemu``, keeping a previous hook as ``qemu.unicache-orig``.

    :raises ConfigError: when the directory cannot be written or a backup would be lost.
    """
    path = hooks_dir / "qemu"
    backup = hooks_dir / BACKUP_NAME
    kept: Path | None = backup if backup.exists() else None
    action = "updated" if is_ours(path) else "installed"
    try:
        hooks_dir.mkdir(parents=True, exist_ok=True)
        if path.exists() and not is_ours(path):
            if backup.exists():
                raise ConfigError(
                    f"{path} is not unicache's and {backup} exists already: move one away first"
                )
            os.replace(path, backup)
            kept = backup
        tmp = path.with_name(".qemu.unicache-tmp")
        tmp.write_text(hook_script(config, python))
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    except OSError as err:
        raise ConfigError(f"cannot install the libvirt hook in {hooks_dir}") from err
    return HookChange(
        path,
        action,
        kept,
        "libvirtd looks for hooks when it starts: restart it (systemctl restart libvirtd)",
    )


def remove_hook(hooks_dir: Path = DEFAULT_HOOKS_DIR) -> HookChange:
    """Remove unicache's hook and put back the previous one; idempotent.

    :raises ConfigError: when the files cannot be changed.
    """
    path = hooks_dir / "qemu"
    backup = hooks_dir / BACKUP_NAME
    if not is_ours(path):
        note = f"{path} is not unicache's hook: left alone" if path.exists() else "no hook"
        return HookChange(path, "not-installed", None, note)
    try:
        if backup.exists():
            os.replace(backup, path)
            return HookChange(path, "removed", backup, f"previous hook restored to {path}")
        path.unlink()
    except OSError as err:
        raise ConfigError(f"cannot remove the libvirt hook {path}") from err
    return HookChange(path, "removed", None, "restart libvirtd to stop it looking for the hook")


# Section: the placement the hook applies ---------------------------------------------------


def _wait_running(dom: Any, domain: str, wait_s: float, running: int) -> None:
    """Until libvirt says the domain runs (``running``: ``VIR_DOMAIN_RUNNING``).

    :raises UnicacheError: when it does not within ``wait_s``.
    """
    deadline = time.monotonic() + wait_s
    while dom.state()[0] != running:
        if time.monotonic() > deadline:
            raise UnicacheError(f"domain {domain} did not reach 'running' in {wait_s:.0f} s")
        time.sleep(0.2)


def apply_placement(
    domain: str, config: HookConfig, options: PlaceOptions | None = None,
    wait_s: float = START_WAIT_S,
) -> dict[str, Any]:
    """Place a just-started domain as ``unicache place`` would, live and in its definition.

    Runs in the background process the hook spawns, never inside the hook itself. The
    VMs already on the host are libvirt's running domains (pins, memory, unicache's
    metadata) with the daemon's observed cache weights (``STATE_DIR/status.json``).

    :param domain: the domain name.
    :param config: what to apply.
    :param options: capacity and the profile (the ``[place]`` table of the config).
    :param wait_s: how long to wait for the domain to be running.
    :returns: the record appended to ``state_dir/hook.jsonl``.
    :raises UnicacheError: when libvirt is unreachable or the domain does not run.
    """
    from unicache.host.libvirt.binding import _quiet_errors, libvirt
    from unicache.host.libvirt.domain_xml import parse_domain
    from unicache.host.libvirt.placement import apply_live, placed_from_libvirt, read_metadata
    from unicache.host.placestate import merge_placed, placed_from_status, quiet_status

    if libvirt is None:
        raise ConfigError("the hook needs libvirt-python")
    options = options or PlaceOptions()
    libvirt.registerErrorHandler(_quiet_errors, None)
    try:
        conn = libvirt.open(config.uri)
    except libvirt.libvirtError as err:
        raise ConfigError(f"cannot connect to libvirt at {config.uri}") from err
    try:
        dom = conn.lookupByName(domain)
        _wait_running(dom, domain, wait_s, libvirt.VIR_DOMAIN_RUNNING)
        text = dom.XMLDesc(0)
        xml = parse_domain(text)
        record: dict[str, Any] = {"time": round(time.time(), 3), "kind": "hook-placement",
                                  "vm": domain}
        kept = read_metadata(ET.fromstring(text))
        if kept is not None:
            record["reason"] = (f"placed by unicache before ({kept.reason}): kept, its "
                                "definition carries the pins (no oscillation)")
            return record
        if xml.vcpupin:
            record["reason"] = "the domain has its own <vcpupin>: left as configured"
            return record
        topo = load_topology(None, None)
        units = topo.units(config.unify)
        status = quiet_status(config.state_dir)
        from_status = placed_from_status(status, units, domain) if status else ()
        placed = merge_placed(from_status, placed_from_libvirt(conn, units, domain))
        basis = (f"{len(placed)} VMs on the host"
                 + (f", weights of the daemon at tick {status.get('tick')}" if status else ""))
        request = VmRequest(domain, xml.vcpus, xml.memory_bytes // (1 << 20))
        try:
            placement = place_vm(topo, request, placed, options, config.unify)
        except PolicyRefusal as refusal:
            record.update(kind="hook-refused", refusal=refusal.kind,
                          reason=f"{refusal.error_message}: left unpinned")
            return record
        applied = apply_live(dom, placement, xml.vcpus, options.memory_mode)
        record.update(
            profile=str(placement.profile),
            vcpus=[
                {"vcpu": p.vcpu, "unit": p.unit, "cpus": format_list(p.cpus), "reason": p.reason}
                for p in placement.vcpus if p.vcpu in applied.vcpus
            ],
            emulator_cpus=format_list(placement.emulator_cpus),
            memory=applied.memory,
            guest=applied.guest,
            reason=f"{placement.reason}, from {basis}",
        )
        return record
    except libvirt.libvirtError as err:
        raise UnicacheError(f"libvirt refused to place {domain}: {err}") from err
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()


def log_record(config: HookConfig, record: dict[str, Any]) -> None:
    """Append a record to ``state_dir/hook.jsonl``."""
    config.state_dir.mkdir(parents=True, exist_ok=True)
    with (config.state_dir / "hook.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(record, separators=(",", ":")) + "\n")
