"""SCU: software cache unification for VMs (the MFC paper, §4; Figure 2's ``mfc_access``).

* :mod:`~unicache.policy.scu.mfc` — the paper's algorithm (Figure 2, eq. 1-2, §4.2-§4.7),
  with its chunk map (:mod:`~unicache.policy.scu.mfc_chunks`) and state
  (:mod:`~unicache.policy.scu.mfc_state`);
* :mod:`~unicache.policy.scu.policy` — SCU for VMs, the adapter: MFC over guest reports,
  placement tables out (:class:`ScuPolicy`, the entry), one VM's table
  (:mod:`~unicache.policy.scu.table`) and how tables go out
  (:mod:`~unicache.policy.scu.publish`);
* :mod:`~unicache.policy.scu.options` — its options from the machine;
  :mod:`~unicache.policy.scu.cost` its cost model (§4.5) and
  :mod:`~unicache.policy.scu.watch` its watch (placed reads must not get slower).
"""

from unicache.policy.scu.policy import ScuPolicy

__all__ = ["ScuPolicy"]
