"""The libvirt qemu hook program: ``python -m unicache.hooks.libvirt_qemu DOMAIN OP SUBOP EXTRA``.

libvirt runs ``/etc/libvirt/hooks/qemu`` for each domain of its QEMU driver; the script
``unicache install-hook`` writes there execs this for the ``prepare`` and ``started``
operations (see :mod:`unicache.host.libvirt.hook`):

* ``prepare``: reads the domain XML on stdin and creates the agent channel's placeholder
  socket if it is missing, so the domain can start while the daemon is down;
* ``started``: spawns ``python -m unicache.hooks.libvirt_qemu --apply DOMAIN`` detached (new
  session, output to ``STATE_DIR/hook.log``) and returns at once: that process places the
  domain through the libvirt API once libvirtd has finished starting it (capacity and
  profile from the ``[place]`` table of the config the hook was installed with).

It always exits 0: unicache never stops a domain from starting. Problems go to stderr
(libvirtd logs them) and to ``STATE_DIR/hook.jsonl``.
"""

from __future__ import annotations

import subprocess
import sys
import time


def _prepare(xml_text: str) -> None:
    from unicache.host.libvirt.channel import make_placeholder_socket
    from unicache.host.libvirt.domain_xml import parse_domain

    xml = parse_domain(xml_text)
    if xml.agent_socket is not None and xml.agent_mode == "connect":
        make_placeholder_socket(xml.agent_socket)


def _started(domain: str) -> None:
    from unicache.host.libvirt.hook import HookConfig

    config = HookConfig.from_env()
    config.state_dir.mkdir(parents=True, exist_ok=True)
    with (config.state_dir / "hook.log").open("a") as out:
        # no inherited pipe: libvirtd waits for the hook's stdout/stderr to close
        subprocess.Popen(
            [sys.executable, "-m", "unicache.hooks.libvirt_qemu", "--apply", domain],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
            close_fds=True,
        )


def _apply(domain: str) -> int:
    from unicache.config import load_config
    from unicache.errors import UnicacheError
    from unicache.host.libvirt.hook import HookConfig, apply_placement, log_record

    config = HookConfig.from_env()
    try:
        options = load_config(config.config).place
        record = apply_placement(domain, config, options)
    except UnicacheError as err:
        record = {"time": round(time.time(), 3), "kind": "hook-failed", "vm": domain,
                  "error": str(err)}
    log_record(config, record)
    print(f"unicache hook: {domain}: {record.get('reason') or record.get('error')}", flush=True)
    return 0 if record["kind"] == "hook-placement" else 1


def main(argv: list[str]) -> int:
    """Run the hook for libvirt's arguments; 0 unless ``--apply`` failed."""
    if len(argv) >= 2 and argv[0] == "--apply":
        return _apply(argv[1])
    domain = argv[0] if argv else ""
    operation = argv[1] if len(argv) > 1 else ""
    try:
        if operation == "prepare":
            _prepare(sys.stdin.read())
        elif operation == "started":
            sys.stdin.read()
            _started(domain)
        else:
            sys.stdin.read()
    except Exception as err:  # never stop a domain: one line for libvirtd's log
        sys.stderr.write(f"unicache hook: {domain} {operation}: {err}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
