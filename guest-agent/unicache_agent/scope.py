"""``unicache-agent scope``: the command line that says where libunicache.so runs (add,
remove and list scopes, the kill switch, and ``apply`` for the package's scripts);
docs/agent.md "Scopes".

shim.conf's format is scope_conf.py's; the files a scope changes besides it (drop-ins,
/etc/ld.so.preload, the budget check) are scope_effects.py's.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
from typing import Any, Dict, List, NoReturn, Optional

from .errors import AgentError, UsageError
from .scope_conf import CONF, EVERYWHERE, EXE, SHIM, UNIT, Scope, ShimConf, parse_target
from .scope_effects import (
    AGENT_TABLE,
    DROPIN_NAME,
    PRELOAD_LIST,
    UNITS_DIR,
    ScopeError,
    ScopePaths,
    check_budget,
    preload_listed,
    reload_systemd,
    remove_dropin,
    require_owner,
    run_helper,
    write_dropin,
)

DOCS = "/usr/share/doc/unicache-agent/agent.md"
#: the kernel command line's kill switch: the shim is off before any userland runs
KERNEL_OFF = "unicache.shim=off"

_DESCRIPTION = f"""\
Where libunicache.so runs. By default it runs in no process; each scope adds some:

  unit:NAME.service  the service's processes and their children: a drop-in,
                     {UNITS_DIR}/NAME.service.d/{DROPIN_NAME},
                     sets LD_PRELOAD (restart the service to take effect)
  exe:/ABS/PATH      processes running that program (as /proc/self/exe names it)
  cgroup:/PATH       processes in that cgroup v2 path or below
  everywhere         every process; refused unless the shim's measured cost meets
                     its budgets (uc_bench budget), or with --force

Each is checked first: the shim must load in a test process. exe:, cgroup: and
everywhere put the shim first in {PRELOAD_LIST} (a new file renamed over the old);
it then runs only in the processes they name. Setuid programs and PID 1 are never in
scope. `off` is the kill switch: the shim is off in every process that starts from now
on (running ones keep their state); {KERNEL_OFF} on the kernel command line does the
same from boot, with no userland. The scopes are the lines of {CONF}.
Changes need root; `list` does not."""

_EPILOG = f"""\
examples:
  unicache-agent scope add unit:nginx.service && systemctl restart nginx.service
  unicache-agent scope add exe:/usr/sbin/nginx cgroup:/system.slice/php-fpm.service
  unicache-agent scope list --json
  unicache-agent scope remove exe:/usr/sbin/nginx
exit status: 0 done; 2 a bad target or flag, not root, or `everywhere` over budget;
1 the shim does not load, or a file cannot be written. Details: {DOCS} ("Scopes")."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad flag reported as every user error is: one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="unicache-agent scope", description=_DESCRIPTION, epilog=_EPILOG,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", metavar="add|remove|list|off|on|apply",
                            parser_class=_Parser)
    sub.required = True
    add = sub.add_parser("add", help="run the shim in these processes")
    add.add_argument("targets", nargs="+", metavar="TARGET",
                     help="unit:NAME.service, exe:/ABS/PATH, cgroup:/PATH or everywhere")
    add.add_argument("--force", action="store_true",
                     help="everywhere: skip the budget check (the shim then runs in every "
                          "process whatever it costs)")
    remove = sub.add_parser("remove", help="stop running the shim in these processes")
    remove.add_argument("targets", nargs="+", metavar="TARGET")
    listing = sub.add_parser("list", help="each scope and what it does")
    listing.add_argument("--json", action="store_true", help="one JSON object")
    sub.add_parser("off", help="kill switch: the shim is off in every process that starts "
                               "from now on")
    sub.add_parser("on", help="undo `off`")
    apply = sub.add_parser("apply", help=f"make the drop-ins and {PRELOAD_LIST} match "
                                         f"{CONF} (the package's scripts run it)")
    apply.add_argument("--was-global", action="store_true",
                       help="the version being replaced preloaded the shim in every "
                            "process: say that it no longer does, unless a scope asks")
    return ap


def _say(text: str) -> None:
    print(text, flush=True)


def _warn(text: str) -> None:
    print(f"unicache-agent: {text}", file=sys.stderr, flush=True)


def _kernel_off(paths: ScopePaths) -> bool:
    """Whether the running kernel's command line holds the kill switch (never for a root
    that is not the running system)."""
    if paths.root != "/":
        return False
    try:
        with open("/proc/cmdline", encoding="utf-8", errors="replace") as f:
            return KERNEL_OFF in f.read().split()
    except OSError:
        return False


def _resolved(paths: ScopePaths, scope: Scope, must_exist: bool) -> Scope:
    """An ``exe:`` scope as /proc/self/exe names the program: its symlinks resolved (on a
    merged-/usr system /bin/cat runs as /usr/bin/cat).

    :raises UsageError: ``must_exist`` and there is no such program.
    """
    if scope.kind != EXE:
        return scope
    full = paths.at(scope.value)
    if not os.path.isfile(full):
        if must_exist:
            raise UsageError(f"{scope.target}: no such program ({full})")
        return scope
    real = os.path.realpath(full)
    if paths.root != "/":
        if not real.startswith(paths.root + "/"):
            return scope  # an absolute link of the image: not resolvable from here
        real = real[len(paths.root):]
    if real != scope.value:
        _say(f"{scope.target}: runs as {real} (/proc/self/exe): scoping exe:{real}")
    return Scope(EXE, real)


def _write(conf: ShimConf) -> None:
    try:
        conf.write()
    except OSError as err:
        raise ScopeError(f"cannot write {conf.path}") from err


def _ensure_loads(paths: ScopePaths, scope: Scope, command: str) -> None:
    """``preload check`` (unit) or ``preload enable`` (global scopes): the shim loads in a
    test process, and for ``enable`` is then first in /etc/ld.so.preload.

    :raises ScopeError: it does not load: nothing was changed.
    """
    done = run_helper(paths, command)
    if not done.ok:
        raise ScopeError(f"{scope.target} not scoped: {done.message}")


def _add(paths: ScopePaths, conf: ShimConf, scopes: List[Scope], force: bool) -> int:
    everywhere = Scope(EVERYWHERE)
    if everywhere in scopes and not conf.has(everywhere):
        if force:
            _say("everywhere: budget check skipped (--force)")
        else:
            verdict = check_budget(paths.bench, paths.at(SHIM), paths.at(AGENT_TABLE))
            if not verdict.met:
                raise UsageError(f"everywhere refused: {verdict.why}; the shim would run in "
                                 f"every process ({DOCS}, \"what each scope costs\"); "
                                 f"`unicache-agent scope add everywhere --force` does it anyway")
    for scope in scopes:
        if scope.kind == UNIT:
            _add_unit(paths, conf, scope)
        else:
            _add_global(paths, conf, scope)
    return 0


def _add_unit(paths: ScopePaths, conf: ShimConf, scope: Scope) -> None:
    unit = scope.value
    dropin = f"{UNITS_DIR}/{unit}.d/{DROPIN_NAME}"
    if conf.has(scope) and os.path.isfile(paths.dropin(unit)):
        if write_dropin(paths, unit):  # an edited one is made ours again
            reload_systemd(paths)
        _say(f"{scope.target}: already scoped ({dropin})")
        return
    _ensure_loads(paths, scope, "check")
    write_dropin(paths, unit)
    if conf.add(scope):
        _write(conf)
    problem = reload_systemd(paths)
    if problem:
        _warn(f"{scope.target}: {problem}")
    _say(f"{scope.target}: LD_PRELOAD set by {dropin}; restart the unit to take effect "
         f"(systemctl restart {unit})")


def _global_effect(scope: Scope) -> str:
    if scope.kind == EVERYWHERE:
        return "every process but setuid programs and PID 1"
    if scope.kind == EXE:
        return f"processes running {scope.value}"
    return f"processes in cgroup {scope.value} or below"


def _add_global(paths: ScopePaths, conf: ShimConf, scope: Scope) -> None:
    if conf.has(scope) and preload_listed(paths):
        _say(f"{scope.target}: already scoped")
        return
    _ensure_loads(paths, scope, "enable")
    if conf.add(scope):
        _write(conf)
    _say(f"{scope.target}: {_global_effect(scope)}, through {PRELOAD_LIST}, from their next "
         f"start (running processes keep their state)")


def _remove(paths: ScopePaths, conf: ShimConf, scopes: List[Scope]) -> int:
    reload = False
    for scope in scopes:
        had_dropin = scope.kind == UNIT and remove_dropin(paths, scope.value)
        had_line = conf.remove(scope)
        if had_line:
            _write(conf)
        reload = reload or had_dropin
        if not (had_dropin or had_line):
            _say(f"{scope.target}: was not scoped")
        elif scope.kind == UNIT:
            _say(f"{scope.target}: drop-in removed; restart the unit to take effect "
                 f"(systemctl restart {scope.value})")
        else:
            _say(f"{scope.target}: removed, for processes that start from now on")
    if reload:
        problem = reload_systemd(paths)
        if problem:
            _warn(problem)
    if not any(s.is_global for s in conf.scopes()) and preload_listed(paths):
        done = run_helper(paths, "disable")
        if not done.ok:
            raise ScopeError(f"cannot take the shim out of {PRELOAD_LIST}: {done.message}")
        _say(f"no cgroup, exe or everywhere scope left: the shim is out of {PRELOAD_LIST}")
    return 0


def _off(paths: ScopePaths, conf: ShimConf, off: bool) -> int:
    if not conf.set_off(off):
        _say("off: already off" if off else "on: was not off")
        return 0
    _write(conf)
    if off:
        _say(f"off: the shim is off in every process that starts from now on; running "
             f"processes keep their state until they restart; {KERNEL_OFF} on the kernel "
             f"command line does the same from boot, with no userland")
    elif _kernel_off(paths):
        _say(f"on: the scopes apply again, but this boot's kernel command line has "
             f"{KERNEL_OFF}: the shim stays off until a boot without it")
    else:
        _say("on: processes that start from now on follow the scopes again")
    return 0


def _entries(paths: ScopePaths, conf: ShimConf) -> List[Dict[str, Any]]:
    """Each scope, what it does and why it is not in effect (None: it is)."""
    listed = preload_listed(paths)
    entries: List[Dict[str, Any]] = []
    for scope in conf.scopes():
        if scope.kind == UNIT:
            does = (f"the unit's processes and their children (LD_PRELOAD from "
                    f"{UNITS_DIR}/{scope.value}.d/{DROPIN_NAME}, once it restarted)")
            problem = None if os.path.isfile(paths.dropin(scope.value)) else (
                "its drop-in is missing: unicache-agent scope apply")
        else:
            does = f"{_global_effect(scope)} (through {PRELOAD_LIST})"
            problem = None if listed else (
                f"the shim is not in {PRELOAD_LIST}: unicache-agent scope apply")
        if conf.off:
            problem = "off: the kill switch is on"
        entries.append({"target": scope.target, "kind": scope.kind, "value": scope.value,
                        "does": does, "in_effect": problem is None, "problem": problem})
    return entries


def _conf_trusted(path: str) -> Optional[str]:
    """Why the shim would ignore shim.conf (None: it reads it)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if st.st_uid != 0 or st.st_mode & 0o022:
        return (f"{CONF} is not root's or others may write it: the shim ignores it (no "
                f"cgroup, exe or everywhere scope applies); `unicache-agent scope add` or "
                f"`off` rewrites it as root's, 0644")
    return None


def _list(paths: ScopePaths, conf: ShimConf, as_json: bool) -> int:
    entries = _entries(paths, conf)
    kernel_off = _kernel_off(paths)
    untrusted = _conf_trusted(paths.conf)
    if as_json:
        print(json.dumps({"conf": CONF, "off": conf.off, "kernel_off": kernel_off,
                          "preload": preload_listed(paths), "scopes": entries,
                          "not_understood": conf.unknown(), "ignored_because": untrusted},
                         indent=None))
        return 0
    if kernel_off:
        _say(f"{'kernel':<34} {KERNEL_OFF}: the shim is off in every process this boot")
    if conf.off:
        _say(f"{'off':<34} kill switch: the shim is off in every process started since")
    for e in entries:
        flag = f" [NOT IN EFFECT: {e['problem']}]" if e["problem"] else ""
        _say(f"{e['target']:<34} {e['does']}{flag}")
    for line in conf.unknown():
        _say(f"{'?':<34} not understood, left as it is: {line}")
    if untrusted:
        _say(f"{'!':<34} {untrusted}")
    if not entries:
        _say("no scope: the shim runs in no process (unicache-agent scope add TARGET)")
    return 0


def _apply(paths: ScopePaths, conf: ShimConf, was_global: bool) -> int:
    """Make the drop-ins and /etc/ld.so.preload match shim.conf (postinst: after an
    install, a reinstall after `remove`, an upgrade)."""
    scopes = conf.scopes()
    units = [s.value for s in scopes if s.kind == UNIT]
    needs_preload = any(s.is_global for s in scopes)
    if needs_preload or units:
        done = run_helper(paths, "enable" if needs_preload else "check")
        if not done.ok:
            for unit in units:
                remove_dropin(paths, unit)
            run_helper(paths, "disable")
            reload_systemd(paths)
            _warn(f"the scopes of {CONF} are not applied: {done.message}; run "
                  f"`unicache-agent scope apply` once it loads")
            return 1
    if not needs_preload and (was_global or preload_listed(paths)):
        if preload_listed(paths):
            done = run_helper(paths, "disable")
            if not done.ok:
                raise ScopeError(f"cannot take the shim out of {PRELOAD_LIST}: {done.message}")
        _warn(f"the shim is no longer preloaded in every process ({PRELOAD_LIST}): it runs "
              f"only where a scope says; `unicache-agent scope add unit:NAME.service` (or "
              f"exe:/PATH, cgroup:/PATH, everywhere) adds one ({DOCS})")
    changed = False
    for unit in units:
        changed = write_dropin(paths, unit) or changed
    if changed:
        problem = reload_systemd(paths)
        if problem:
            _warn(problem)
    return 0


def _targets(paths: ScopePaths, texts: List[str], must_exist: bool) -> List[Scope]:
    """Every target parsed before anything changes (one bad target changes nothing)."""
    scopes: List[Scope] = []
    for text in texts:
        scope = _resolved(paths, parse_target(text), must_exist)
        if scope not in scopes:
            scopes.append(scope)
    return scopes


def _lock_conf_dir(paths: ScopePaths) -> int:
    """Hold shim.conf's directory locked (flock) until the command ends: two commands at
    once would each rewrite the file from what they read, and one's line would be lost.
    The directory, not a lock file: nothing is left behind."""
    directory = os.path.dirname(paths.conf)
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as err:
        raise ScopeError(f"cannot lock {directory}") from err
    return fd


def _run(args: argparse.Namespace) -> int:
    paths = ScopePaths.from_env(os.environ)
    if args.command == "list":
        return _list(paths, _read(paths), args.json)
    require_owner(paths)
    lock = _lock_conf_dir(paths)
    try:
        conf = _read(paths)
        if args.command == "add":
            return _add(paths, conf, _targets(paths, args.targets, True), args.force)
        if args.command == "remove":
            return _remove(paths, conf, _targets(paths, args.targets, False))
        if args.command in ("off", "on"):
            return _off(paths, conf, args.command == "off")
        return _apply(paths, conf, args.was_global)
    finally:
        os.close(lock)  # and with it the lock


def _read(paths: ScopePaths) -> ShimConf:
    try:
        return ShimConf.read(paths.conf)
    except (OSError, UnicodeDecodeError) as err:
        raise ScopeError(f"cannot read {paths.conf}") from err


def main(argv: List[str]) -> int:
    """``unicache-agent scope ARGS``.

    :returns: 0 done; 2 bad input (a target, a flag, not root, `everywhere` over budget);
        1 a failure (the shim does not load, a file cannot be written); each error one line.
    """
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except UsageError as err:
        _warn(f"scope {args.command}: {err}")
        return 2
    except AgentError as err:
        _warn(f"scope {args.command}: {err}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
