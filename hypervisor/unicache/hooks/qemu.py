"""The name older hook scripts run for the libvirt qemu hook: see :mod:`.libvirt_qemu`.

``unicache install-hook`` of earlier versions wrote a ``/etc/libvirt/hooks/qemu`` that runs
``python -m unicache.hooks.qemu``. Without this module such a hook would fail at
``prepare``, and libvirt would refuse to start the domain; with it, the installed hook
keeps working until ``unicache install-hook`` is run again (it writes the new name).
Nothing else uses this name.
"""

from __future__ import annotations

import sys

from unicache.hooks.libvirt_qemu import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
