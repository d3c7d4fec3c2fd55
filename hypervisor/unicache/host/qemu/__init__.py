"""unicache's own QEMU backend: guests launched and managed directly, without libvirt.

One module per concern:

* ``numa``: the ``--numa`` spec parsed into :class:`GuestNodeSpec` values, and each
  node's backing (RAM, ``memory-backend-colored``, or the 2 MiB hugepage fallback);
* ``image``: the guest image ``make image`` builds;
* ``registry``: one record per running VM (``$UNICACHE_STATE_DIR``, default
  ``/run/unicache/vms``), so ``unicache vm list`` and the daemon find it;
* ``process``: the QEMU process: spawn, wait for QMP, liveness by pid and start time, kill;
* ``qmp``: one QMP command per connection (``qemu.qmp``), with a sync facade;
* ``control``: the host end of the guest's demo/test command runner;
* ``accel``: KVM or TCG, chosen by a short boot probe, cached per host boot;
* ``colored``: the host side of colored guest memory: the patched QEMU, host page colors,
  host reservations;
* ``cmdline``: what a VM is started with (:class:`VmConfig`) and QEMU's argv for it;
* ``vm``: :class:`QemuVm`, which puts them together: start, talk to, attach to, stop a VM;
* ``source``: the registry's running VMs as the daemon sees them (a ``VmSource``).

docs/images.md describes the whole; ``from unicache.host.qemu import QemuVm, VmConfig``
is all most callers need.
"""

import logging

from unicache.host.qemu.cmdline import AGENT_PORT, CONTROL_PORT, VmConfig
from unicache.host.qemu.control import GuestResult
from unicache.host.qemu.image import GuestImage, default_image_dir, ensure_image, load_image
from unicache.host.qemu.numa import (
    BACKING_COLORED,
    BACKING_HUGEPAGE,
    BACKING_RAM,
    GuestNodeSpec,
    parse_numa,
    plan_nodes,
)
from unicache.host.qemu.qmp import parse_cpus_fast
from unicache.host.qemu.registry import (
    DEFAULT_STATE_DIR,
    VmRecord,
    check_name,
    list_vms,
    read_record,
    state_dir,
)
from unicache.host.qemu.vm import QemuVm

# a library stays silent unless the application configures logging
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "AGENT_PORT",
    "BACKING_COLORED",
    "BACKING_HUGEPAGE",
    "BACKING_RAM",
    "CONTROL_PORT",
    "DEFAULT_STATE_DIR",
    "GuestImage",
    "GuestNodeSpec",
    "GuestResult",
    "QemuVm",
    "VmConfig",
    "VmRecord",
    "check_name",
    "default_image_dir",
    "ensure_image",
    "list_vms",
    "load_image",
    "parse_cpus_fast",
    "parse_numa",
    "plan_nodes",
    "read_record",
    "state_dir",
]
