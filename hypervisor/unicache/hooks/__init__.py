"""Hook programs other software runs: the libvirt ``qemu`` hook (:mod:`unicache.hooks.qemu`)."""
