"""The guest image: finding and loading what ``make image`` built, building it when needed.

docs/images.md describes the image; a VM boots its kernel and initramfs directly and runs on
a throw-away copy of its disk.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from unicache.errors import ConfigError

#: the guest image ``make image`` builds, relative to the repository
DEFAULT_IMAGE_SUBDIR = Path("build/images/debian12")
#: the image's variants (images/build-image.sh): ``make`` target and directory of each
IMAGE_VARIANTS = {"init": ("image", DEFAULT_IMAGE_SUBDIR),
                  "systemd": ("image-systemd", Path("build/images/debian12-systemd"))}
#: the init the initramfs starts when the image does not name one (the ``init`` variant's)
DEFAULT_INIT = "/sbin/unicache-init"


@dataclass(frozen=True, slots=True)
class GuestImage:
    """A built guest image (``image.json`` of ``make image``).

    :param directory: where it is.
    :param kernel: the kernel.
    :param initrd: the initramfs.
    :param disk: the root disk (raw ext4).
    :param kernel_version: the guest kernel's release.
    :param init: the root file system's init (``/sbin/init``: systemd).
    """

    directory: Path
    kernel: Path
    initrd: Path
    disk: Path
    kernel_version: str
    init: str = DEFAULT_INIT


def _repo_root() -> Path:
    # hypervisor/unicache/host/qemu/image.py -> repository root
    return Path(__file__).resolve().parents[4]


def default_image_dir() -> Path:
    """The guest image directory: env ``UNICACHE_IMAGE_DIR``, else the repository's build dir."""
    env = os.environ.get("UNICACHE_IMAGE_DIR")
    if env:
        return Path(env)
    for base in (Path.cwd(), _repo_root()):
        if (base / DEFAULT_IMAGE_SUBDIR / "image.json").exists():
            return base / DEFAULT_IMAGE_SUBDIR
    return _repo_root() / DEFAULT_IMAGE_SUBDIR


def load_image(directory: Path | None = None) -> GuestImage:
    """Load a built guest image.

    :param directory: the image directory (default :func:`default_image_dir`).
    :returns: the image.
    :raises ConfigError: when it is not built or incomplete (the message says ``make image``).
    """
    d = directory or default_image_dir()
    meta = d / "image.json"
    try:
        obj = json.loads(meta.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ConfigError(f"no guest image at {d}: run `make image`") from err
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read {meta}") from err
    if not isinstance(obj, dict):
        raise ConfigError(f"{meta} is not a JSON object")
    try:
        image = GuestImage(d, d / str(obj["kernel"]), d / str(obj["initrd"]),
                           d / str(obj["disk"]), str(obj["kernel_version"]),
                           str(obj.get("init") or DEFAULT_INIT))
    except KeyError as err:
        raise ConfigError(
            f"{meta} lacks member {err.args[0]!r}: rebuild with `make image`") from err
    for path in (image.kernel, image.initrd, image.disk):
        if not path.is_file():
            raise ConfigError(f"guest image incomplete, {path} missing: run `make image`")
    return image


def ensure_image(progress: Callable[[str], None] | None = None,
                 repo: Path | None = None, variant: str = "init") -> GuestImage:
    """Build the guest image with ``make image`` when needed (make skips an up-to-date one).

    :param progress: called with each line of the build's output (default: discarded).
    :param repo: the repository (default: the one this package lives in).
    :param variant: ``init`` (``make image``) or ``systemd`` (``make image-systemd``).
    :returns: the built image.
    :raises ConfigError: when the build fails (the message has the last output line).
    """
    root = repo or _repo_root()
    target, subdir = IMAGE_VARIANTS[variant]
    if variant == "init" and (os.environ.get("UNICACHE_IMAGE_DIR")
                              or not (root / "images" / "images.mk").exists()):
        return load_image()
    top = (root / "Makefile").read_text(encoding="utf-8", errors="replace")
    if "images.mk" in top:
        cmds = [["make", "--no-print-directory", target]]
    else:  # the fragment alone (the shim has its rule in the top Makefile's fragments)
        cmds = [["make", "--no-print-directory", "shim-build"],
                ["make", "--no-print-directory", "-f", "images/images.mk", target]]
    last = ""
    for cmd in cmds:
        with subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace") as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                last = line.rstrip() or last
                if progress is not None:
                    progress(line.rstrip())
        if proc.returncode != 0:
            raise ConfigError(f"`{' '.join(cmd)}` failed: {last}")
    return load_image(root / subdir)
