"""Hook programs other software runs: the libvirt qemu hook (:mod:`unicache.hooks.libvirt_qemu`).

:mod:`unicache.hooks.qemu` is only the name hook scripts installed by older versions run.
"""
