"""What a scope changes besides shim.conf: a unit's systemd drop-in, /etc/ld.so.preload
(through the package's preload helper, whose load check and atomic rename the package's
scripts use too), systemd's reload, and the measured budgets ``everywhere`` must meet.

Every path is inside a root (``UNICACHE_SCOPE_ROOT``, default ``/``), so that the tests
and guest-agent/install.sh act on a directory instead of the running system.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional

from .errors import AgentError, UsageError
from .scope_conf import CONF, SHIM, write_atomically

#: act on the system mounted at this directory (an image, a test's temporary root)
ENV_ROOT = "UNICACHE_SCOPE_ROOT"
#: the preload helper (default: the root's /usr/lib/unicache-agent/preload)
ENV_HELPER = "UNICACHE_PRELOAD_HELPER"
#: the budget runner (default: the root's /usr/lib/unicache-agent/uc_bench)
ENV_BENCH = "UNICACHE_UC_BENCH"
#: the systemctl to reload with; under a root other than / it is run only when set
ENV_SYSTEMCTL = "UNICACHE_SYSTEMCTL"

LIB = "/usr/lib/unicache-agent"
UNITS_DIR = "/etc/systemd/system"
PRELOAD_LIST = "/etc/ld.so.preload"
DROPIN_NAME = "50-unicache-shim.conf"
#: the measurement runs the shim's cases under TCG too: minutes, never hours
BENCH_TIMEOUT_S = 900.0
#: the load check runs two short programs (and the shim's self-test when installed)
HELPER_TIMEOUT_S = 300.0


class ScopeError(AgentError):
    """A scope cannot be applied (the shim does not load, a file cannot be written): exit 1."""


def dropin_text(unit: str) -> str:
    """The drop-in that preloads the shim in ``unit``'s processes (and their children)."""
    return (f"# unicache-agent scope add unit:{unit}: the shim in this service's processes; "
            f"`unicache-agent scope remove unit:{unit}` removes this file\n"
            f"[Service]\nEnvironment=LD_PRELOAD={SHIM}\n")


@dataclass(frozen=True)
class ScopePaths:
    """Where the scopes' files are, for one root."""

    root: str
    helper: str
    bench: str
    #: None: never reload (a root that is not the running system)
    systemctl: Optional[str]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ScopePaths:
        """The paths the environment names.

        :raises UsageError: ``UNICACHE_SCOPE_ROOT`` is not a directory.
        """
        root = os.path.abspath(env.get(ENV_ROOT) or "/")
        if not os.path.isdir(root):
            raise UsageError(f"{ENV_ROOT}={root}: not a directory")
        within = root if root != "/" else ""
        systemctl = env.get(ENV_SYSTEMCTL) or ("systemctl" if root == "/" else None)
        return cls(root, env.get(ENV_HELPER) or f"{within}{LIB}/preload",
                   env.get(ENV_BENCH) or f"{within}{LIB}/uc_bench", systemctl)

    def at(self, path: str) -> str:
        """``path`` of the guest, inside the root."""
        return path if self.root == "/" else self.root + path

    @property
    def conf(self) -> str:
        return self.at(CONF)

    @property
    def preload_list(self) -> str:
        return self.at(PRELOAD_LIST)

    def dropin(self, unit: str) -> str:
        """The unit's drop-in file (written by ``scope add unit:``), inside the root."""
        return self.at(f"{UNITS_DIR}/{unit}.d/{DROPIN_NAME}")

    @property
    def systemd_running(self) -> bool:
        return os.path.isdir(self.at("/run/systemd/system"))


def require_owner(paths: ScopePaths) -> None:
    """Refuse a caller who could not write the root's /etc: root, or the owner of a test's
    temporary root.

    :raises UsageError: anyone else, in one line saying to run it as root.
    """
    euid = os.geteuid()
    if euid != 0 and euid != os.stat(paths.root).st_uid:
        raise UsageError(f"only root changes the shim's scopes ({paths.conf}, "
                         f"{paths.preload_list}, units' drop-ins): run it with sudo")


# -- /etc/ld.so.preload, through the helper ----------------------------------------------


@dataclass(frozen=True)
class HelperResult:
    ok: bool
    #: the helper's first line, without its "unicache-agent: " prefix
    message: str


def run_helper(paths: ScopePaths, command: str) -> HelperResult:
    """``preload check|enable|disable`` on the root.

    :raises ScopeError: the helper is missing or did not finish.
    """
    if not os.path.isfile(paths.helper):
        raise ScopeError(f"no preload helper at {paths.helper} (is the unicache-agent "
                         f"package installed?)")
    env = dict(os.environ)
    env.pop(ENV_ROOT, None)
    if paths.root != "/":
        env[ENV_ROOT] = paths.root
    try:
        done = subprocess.run(["sh", paths.helper, command], capture_output=True, text=True,
                              env=env, timeout=HELPER_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ScopeError(f"{paths.helper} {command} did not finish") from err
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    message = said[0].removeprefix("unicache-agent: ") if said else ""
    return HelperResult(done.returncode == 0, message)


def preload_listed(paths: ScopePaths) -> bool:
    """Whether /etc/ld.so.preload names the shim (its words, as ld.so splits them)."""
    try:
        with open(paths.preload_list, encoding="utf-8", errors="replace") as f:
            words = f.read().replace(":", " ").split()
    except FileNotFoundError:
        return False
    return SHIM in words


# -- units --------------------------------------------------------------------------------


def write_dropin(paths: ScopePaths, unit: str) -> bool:
    """Write the unit's drop-in; whether it was missing or different."""
    path = paths.dropin(unit)
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == dropin_text(unit):
                return False
    except FileNotFoundError:
        pass
    try:
        write_atomically(path, dropin_text(unit))
    except OSError as err:
        raise ScopeError(f"cannot write {path}") from err
    return True


def remove_dropin(paths: ScopePaths, unit: str) -> bool:
    """Delete the unit's drop-in, and its directory when nothing else is in it; whether
    there was one."""
    path = paths.dropin(unit)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise ScopeError(f"cannot remove {path}") from err
    with contextlib.suppress(OSError):  # not empty: the administrator's own drop-ins
        os.rmdir(os.path.dirname(path))
    return True


def reload_systemd(paths: ScopePaths) -> Optional[str]:
    """``systemctl daemon-reload`` when systemd runs the root; what went wrong, or None."""
    if paths.systemctl is None or not paths.systemd_running:
        return None
    try:
        done = subprocess.run([paths.systemctl, "daemon-reload"], capture_output=True,
                              text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"systemctl daemon-reload: {err}"
    if done.returncode != 0:
        return f"systemctl daemon-reload: exit {done.returncode} {done.stderr.strip()[:160]}"
    return None


# -- the budget `everywhere` must meet ----------------------------------------------------


@dataclass(frozen=True)
class BudgetVerdict:
    met: bool
    #: the failing cases, or why there is no measurement
    why: str = ""


def _case_text(case: Mapping[str, Any]) -> str:
    try:
        return (f"{case.get('case', '?')} {float(case['upper_ns']):.0f} ns > "
                f"{float(case['limit_ns']):.0f} ns")
    except (KeyError, TypeError, ValueError):
        return str(case.get("case", "?"))


#: the file the budget's reads go through (page-cached first), and where it is made
BUDGET_FILE_BYTES = 4 << 20
BUDGET_DIR = "/var/tmp"
#: the agent's table: with it, a new file is one the table does not name
AGENT_TABLE = "/dev/shm/unicache-table"


def _budget_file(directory: str) -> str:
    """A page-cached file of BUDGET_FILE_BYTES that no table names (the caller removes it)."""
    fd, path = tempfile.mkstemp(prefix="unicache-budget-", dir=directory)
    try:
        block = os.urandom(1 << 20)
        for _ in range(BUDGET_FILE_BYTES // len(block)):
            os.write(fd, block)
        os.lseek(fd, 0, os.SEEK_SET)
        while os.read(fd, 1 << 20):  # into the page cache
            pass
    finally:
        os.close(fd)
    return path


def check_budget(bench: str, shim: str, table: str = AGENT_TABLE,
                 timeout_s: float = BENCH_TIMEOUT_S) -> BudgetVerdict:
    """Run ``BENCH budget`` under the shim, over a fresh page-cached file (one no table
    names, so the unplaced cases, or without the agent's table those of no table, and the
    pipe and socket): met only when it exits 0 and its JSON line says every case met. The
    placed case needs a table that places the file, which only the agent writes: the
    project's benchmark measures it (docs/agent.md, "What each scope costs").

    The runner prints ``{"cases":[{"case","upper_ns","limit_ns","met"},...],"met":bool}``
    and exits 0 when all budgets are met, 1 otherwise.
    """
    if not os.access(bench, os.X_OK):
        return BudgetVerdict(False, f"{bench} is not installed, so the shim's cost is not "
                                    f"measured")
    state = "unplaced" if os.path.exists(table) else "none"
    try:
        data = _budget_file(BUDGET_DIR if os.path.isdir(BUDGET_DIR) else "/tmp")
    except OSError as err:
        return BudgetVerdict(False, f"no file to measure with ({err})")
    try:
        env = {**os.environ, "LD_PRELOAD": shim}
        env.pop("UNICACHE_DISABLE", None)
        done = subprocess.run([bench, "budget", "--file", data, "--table-state", state],
                              capture_output=True, text=True, timeout=timeout_s, check=False,
                              env=env)
    except (OSError, subprocess.TimeoutExpired) as err:
        return BudgetVerdict(False, f"{bench} budget did not finish ({err})")
    finally:
        os.unlink(data)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    try:
        report = json.loads(lines[-1]) if lines else None
        cases: List[Mapping[str, Any]] = list(report["cases"]) if report else []
    except (ValueError, KeyError, TypeError):
        report, cases = None, []
    if not isinstance(report, dict):
        err_line = (done.stderr.strip().splitlines() or [""])[0][:160]
        return BudgetVerdict(False, f"{bench} budget gave no report (exit {done.returncode}"
                                    f"{': ' + err_line if err_line else ''})")
    failing = [c for c in cases if not (isinstance(c, dict) and c.get("met") is True)]
    if done.returncode == 0 and report.get("met") is True and not failing:
        return BudgetVerdict(True)
    if not failing:
        return BudgetVerdict(False, f"{bench} budget: exit {done.returncode}, met "
                                    f"{report.get('met')!r}")
    shown = "; ".join(_case_text(c) if isinstance(c, dict) else "?" for c in failing[:4])
    more = f" and {len(failing) - 4} more" if len(failing) > 4 else ""
    return BudgetVerdict(False, f"over budget in {len(failing)} of {len(cases)} cases: "
                                f"{shown}{more}")
