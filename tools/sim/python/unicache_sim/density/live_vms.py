"""The guests of ``unicache density --live``: boot them, run a program in all at once, stop them.

They boot from the project's image (``make image``).

:class:`LiveGuests` is a context manager: on entry it starts every guest's QEMU (they
boot side by side) and waits for each guest's command runner; on exit, also after an
error or an interrupt, it stops every guest it started and notes any QEMU still running
(``left``). Programs run through the guest's command runner
(:meth:`unicache.host.qemu.QemuVm.run_in_guest`), one host thread per guest, so that the
guests' requests run at the same time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unicache.errors import UnicacheError
from unicache.host.qemu import QemuVm, VmConfig, load_image

#: seconds a guest may take to boot (TCG, guests booting side by side on 2 CPUs)
BOOT_TIMEOUT_S = 300.0


class LiveError(UnicacheError):
    """A guest program failed or printed no result: the live run cannot go on."""


@dataclass(frozen=True, slots=True)
class GuestSpec:
    """One guest to boot.

    :param name: its name (the registry's and the daemon's).
    :param vcpus: vCPUs.
    :param memory_mib: memory.
    """

    name: str
    vcpus: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class GuestCommand:
    """A program to run in one guest.

    :param guest: the guest's name.
    :param argv: the command.
    :param env: extra environment (``LD_PRELOAD`` for the shim).
    :param timeout: seconds the guest lets it run.
    """

    guest: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 120.0


class LiveGuests:
    """Boots the guests on entry, stops them all on exit.

    :param specs: the guests.
    :param registry: the VM registry (the daemon's ``UNICACHE_STATE_DIR``).
    :param image_dir: the guest image (``None``: the project's, ``make image``).
    :param say: progress lines.
    """

    def __init__(self, specs: Sequence[GuestSpec], registry: Path, image_dir: Path | None,
                 say: Callable[[str], None]) -> None:
        self.specs = tuple(specs)
        self.registry = registry
        self.image_dir = image_dir
        self.say = say
        self.vms: dict[str, QemuVm] = {}
        #: the accelerator QEMU ran with (kvm or tcg) and why
        self.accel = ""
        #: guests whose QEMU still ran after the stop (empty: none left)
        self.left: tuple[str, ...] = ()

    def __enter__(self) -> LiveGuests:
        load_image(self.image_dir)  # a missing image: one line (make image), nothing started
        try:
            for spec in self.specs:
                self.say(f"starting guest {spec.name} ({spec.vcpus} vCPU, {spec.memory_mib} MiB)")
                vm = QemuVm(VmConfig(spec.name, vcpus=spec.vcpus, memory_mib=spec.memory_mib,
                                     image_dir=self.image_dir), self.registry)
                self.vms[spec.name] = vm
                vm.start()
                if vm.accel is not None:
                    self.accel = vm.accel.line()
            for name, vm in self.vms.items():
                self.say(f"waiting for guest {name} to boot")
                vm.wait_for_boot(BOOT_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop every guest started (each one even if another fails to stop)."""
        errors: list[BaseException] = []
        for name, vm in self.vms.items():
            self.say(f"stopping guest {name}")
            try:
                vm.stop()
            except Exception as err:  # stop the others, then raise
                errors.append(err)
        self.left = tuple(name for name, vm in self.vms.items() if vm.is_running())
        for name in self.left:
            self.vms[name].stop(force=True)
        if errors:
            raise errors[0]

    def run_all(self, commands: Sequence[GuestCommand]) -> dict[str, dict[str, Any]]:
        """Run one program per guest, all at once; each must print one JSON object.

        :returns: guest name -> the object its program printed.
        :raises LiveError: naming the guest whose program failed.
        """
        def one(cmd: GuestCommand) -> dict[str, Any]:
            result = self.vms[cmd.guest].run_in_guest(list(cmd.argv), env=dict(cmd.env),
                                                      timeout=cmd.timeout)
            if not result.ok:
                raise LiveError(f"guest {cmd.guest}: the request program failed "
                                f"({result.exit_code}): {result.stderr.strip()[-300:]}")
            try:
                out = json.loads(result.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError) as err:
                raise LiveError(f"guest {cmd.guest}: the request program printed no result: "
                                f"{result.stdout.strip()[-200:]!r}") from err
            if not isinstance(out, dict):
                raise LiveError(f"guest {cmd.guest}: the request program printed {out!r}")
            return out

        with ThreadPoolExecutor(max_workers=max(1, len(commands))) as pool:
            futures = {cmd.guest: pool.submit(one, cmd) for cmd in commands}
            return {name: f.result() for name, f in futures.items()}
