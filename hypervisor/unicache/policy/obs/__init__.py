"""OBS: vCPU placement by cache weight (the observations paper's "Policy: Migrating across
caches", "Policy: Reducing cache interference" and "Policy: Addressing fairness": OBS-X,
OBS-L and OBS-C).

* :mod:`~unicache.policy.obs.policy` — OBS-X, OBS-L and OBS-C over cache units
  (:class:`ObsPolicy`, the entry), with its options and state
  (:mod:`~unicache.policy.obs.options`);
* the cache weight (:mod:`~unicache.policy.obs.weight`), OBS-L
  (:mod:`~unicache.policy.obs.local`), OBS-C (:mod:`~unicache.policy.obs.credit`),
  sharing-aware OBS-X (:mod:`~unicache.policy.obs.cluster`), its periodic rebalance
  (:mod:`~unicache.policy.obs.rebalance`) and a vCPU's home nodes
  (:mod:`~unicache.policy.obs.home`);
* its step-asides (:mod:`~unicache.policy.obs.aside`): no two heavy vCPUs to keep apart
  (:mod:`~unicache.policy.obs.gain`) and a pin's wait against its cache time
  (:mod:`~unicache.policy.obs.queue`).
"""

from unicache.policy.obs.policy import ObsPolicy

__all__ = ["ObsPolicy"]
