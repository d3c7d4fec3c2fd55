"""QEMU's command line: what a VM is started with (:class:`VmConfig`) and the argv for it (pure).

The guest image boots directly (``-kernel``/``-initrd``; the initramfs switches to the image's
init) on a throw-away disk (``snapshot=on``: the base image stays clean, unless
``keep_disk_writes``), with two virtio-serial ports (the agent's left out with
``agent_channel=False``) and a QMP socket:

* ``org.unicache.agent.0``: the guest agent's channel. By default QEMU *connects* to the
  agent socket (``reconnect=1``), on which :class:`unicache.channel.ChannelServer` listens
  (docs/protocol.md "Transport"); ``agent_listen=True`` makes QEMU listen there instead.
* ``org.unicache.control.0``: the demo/test command runner (:mod:`.control`).
* ``-qmp unix:...``: ``query-cpus-fast`` gives each vCPU's host thread id (:mod:`.qmp`).

No network unless ``user_network`` (QEMU's user-mode networking: the guest reaches the host
as 10.0.2.2, as a cloud-init test guest fetches its NoCloud seed and a package from a test
server).

Each guest NUMA node gets its memory object as :func:`.numa.plan_nodes` decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from unicache.cpulist import format_list
from unicache.errors import ConfigError
from unicache.host.qemu.accel import QEMU_BINARY
from unicache.host.qemu.colored import COLORED_BACKEND, QemuBinary
from unicache.host.qemu.image import DEFAULT_INIT, GuestImage
from unicache.host.qemu.numa import (
    BACKING_COLORED,
    BACKING_HUGEPAGE,
    GuestNodeSpec,
    plan_nodes,
)
from unicache.host.qemu.registry import check_name

#: virtio-serial port names (the agent's is fixed by docs/protocol.md)
AGENT_PORT = "org.unicache.agent.0"
CONTROL_PORT = "org.unicache.control.0"
#: qboot (QEMU's minimal firmware for -kernel boots) saves about 1 s of SeaBIOS under TCG
QBOOT = Path("/usr/share/qemu/qboot.rom")
#: the NIC of ``user_network`` (virtio, as a cloud guest's; the driver is virtio_net)
USER_NIC_MODEL = "virtio-net-pci"


@dataclass(frozen=True, slots=True)
class VmConfig:
    """What a VM is started with.

    :param name: the VM's name (also QEMU's ``-name guest=``).
    :param vcpus: number of vCPUs.
    :param memory_mib: guest memory.
    :param numa: guest NUMA nodes (empty: none).
    :param accel: ``auto`` (probe), ``kvm`` or ``tcg``; ``None`` reads env ``UNICACHE_ACCEL``.
    :param agent_socket: the agent channel's unix socket (default ``<run dir>/agent.sock``).
    :param agent_listen: QEMU listens on ``agent_socket`` instead of connecting to it.
    :param image_dir: the guest image (default :func:`.image.default_image_dir`).
    :param append: extra kernel command-line words.
    :param agent_channel: attach the agent's port (``False``: a guest whose host has not
        attached it).
    :param keep_disk_writes: the guest writes to the image's disk itself instead of a
        throw-away layer (for a copy of an image that must keep what a boot changed).
    :param user_network: a virtio NIC on QEMU's user-mode network (``-nic user``: DHCP gives
        the guest 10.0.2.15, the host's loopback is 10.0.2.2, nothing reaches the guest
        from outside); ``False``: no NIC at all.
    :param icount_shift: TCG only: the guest's clock counts instructions (QEMU's
        ``-icount shift=N,sleep=off``: each executed instruction is 2**N ns of guest time,
        idle time is skipped), so that a time measured in the guest is its work, whatever
        else the host runs; ``None``: the host's clock.
    """

    name: str
    vcpus: int = 2
    memory_mib: int = 1024
    numa: tuple[GuestNodeSpec, ...] = ()
    accel: str | None = None
    agent_socket: Path | None = None
    agent_listen: bool = False
    image_dir: Path | None = None
    append: tuple[str, ...] = ()
    agent_channel: bool = True
    keep_disk_writes: bool = False
    user_network: bool = False
    icount_shift: int | None = None

    def __post_init__(self) -> None:
        check_name(self.name)
        if not 1 <= self.vcpus <= 255:
            raise ConfigError(f"vcpus must be 1..255, not {self.vcpus}")
        if not 64 <= self.memory_mib <= 1 << 20:
            raise ConfigError(f"memory must be 64..1048576 MiB, not {self.memory_mib}")
        if self.icount_shift is not None and not 0 <= self.icount_shift <= 10:
            raise ConfigError(f"icount_shift must be 0..10, not {self.icount_shift}")


def memdev(n: GuestNodeSpec) -> str:
    """The ``-object`` of a planned node's memory."""
    size = f"id=mem{n.node},size={n.memory_mib}M"
    if n.backing == BACKING_COLORED:
        # QEMU's option syntax escapes a comma inside a value by doubling it
        spec = f"{COLORED_BACKEND},{size},colors={format_list(n.colors).replace(',', ',,')}"
        return spec + (f",ncolors={n.ncolors}" if n.ncolors else "")
    if n.backing == BACKING_HUGEPAGE:
        return f"memory-backend-memfd,{size},hugetlb=on,hugetlbsize=2M"
    return f"memory-backend-ram,{size}"


def command_line(c: VmConfig, image: GuestImage, accel: str, qemu: QemuBinary | None, *,
                 agent_socket: Path, control_socket: Path, qmp_socket: Path,
                 console_log: Path) -> list[str]:
    """QEMU's argv for a VM (pure: no side effects).

    :param c: the VM's configuration.
    :param image: the guest image.
    :param accel: ``kvm`` or ``tcg``.
    :param qemu: the QEMU to run (``None``: ``qemu-system-x86_64`` without the colored
        backend); colored nodes not planned yet (:func:`.numa.plan_nodes`) are planned for it.
    :param agent_socket: the agent channel's unix socket.
    :param control_socket: the command runner's socket (QEMU listens).
    :param qmp_socket: the QMP socket (QEMU listens).
    :param console_log: where the guest's serial console goes.
    :returns: the argv.
    """
    qb = qemu or QemuBinary(QEMU_BINARY, False)
    nodes = c.numa if all(n.backing for n in c.numa) else plan_nodes(c.numa, qb.colored, 0)
    append = ["console=ttyS0", "root=/dev/vda", "rw", "quiet", "panic=-1",
              f"unicache.name={c.name}", *c.append]
    if image.init != DEFAULT_INIT:
        append.append(f"unicache.init={image.init}")  # the initramfs switches to it
    if c.agent_listen:
        agent_chr = f"socket,id=uc0,path={agent_socket},server=on,wait=off"
    else:
        agent_chr = f"socket,id=uc0,path={agent_socket},reconnect=1"
    argv = [
        qb.path, "-name", f"guest={c.name},debug-threads=on",
        "-accel", accel, "-smp", str(c.vcpus), "-m", f"{c.memory_mib}M",
        "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
        *(["-bios", QBOOT.name] if QBOOT.exists() else []),
        "-kernel", str(image.kernel), "-initrd", str(image.initrd),
        "-append", " ".join(append),
        # snapshot=on: writes go to a temporary file, the base image stays clean
        "-drive", f"file={image.disk},format=raw,if=virtio"
                  + ("" if c.keep_disk_writes else ",snapshot=on"),
        *(["-nic", f"user,model={USER_NIC_MODEL}"] if c.user_network else []),
        "-device", "virtio-serial-pci,id=vser0",
    ]
    if c.icount_shift is not None:
        if accel != "tcg":
            raise ConfigError(f"a clock that counts instructions needs TCG, not {accel}")
        argv += ["-icount", f"shift={c.icount_shift},sleep=off"]
    if c.agent_channel:
        argv += ["-chardev", agent_chr,
                 "-device", f"virtserialport,bus=vser0.0,chardev=uc0,name={AGENT_PORT}"]
    argv += [
        "-chardev", f"socket,id=ctl0,path={control_socket},server=on,wait=off",
        "-device", f"virtserialport,bus=vser0.0,chardev=ctl0,name={CONTROL_PORT}",
        "-qmp", f"unix:{qmp_socket},server=on,wait=off",
        "-serial", f"file:{console_log}",
    ]
    for n in nodes:
        argv += ["-object", memdev(n)]
        spec = f"node,nodeid={n.node},memdev=mem{n.node}"
        for part in format_list(n.cpus).split(",") if n.cpus else []:
            spec += f",cpus={part}"
        argv += ["-numa", spec]
    return argv
