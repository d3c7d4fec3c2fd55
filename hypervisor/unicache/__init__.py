"""unicache: software cache unification for virtual machines on KVM/Xen hosts.

The package is split as in ARCHITECTURE.md: pure policies (:mod:`unicache.policy`),
the model they read and write (:mod:`unicache.model`, :mod:`unicache.topology`) and
hosts that observe and act (:mod:`unicache.host`).
"""

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
