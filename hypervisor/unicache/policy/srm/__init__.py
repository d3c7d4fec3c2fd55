"""SRM-buffer: page colors for streaming page caches (the SRM paper, §3.2, Figure 7).

* :mod:`~unicache.policy.srm.buffer` — the paper's algorithm: which LLC color each
  page-cache sequence gets, page by page;
* :mod:`~unicache.policy.srm.colors` — its per-VM adapter: guest reports in, the colored
  guest node of each run of a streaming file out (:func:`colors_round`, the entry);
  :mod:`~unicache.policy.srm.locality` which files a guest streams;
  :mod:`~unicache.policy.srm.gain` the step-aside (is coloring worth it).
"""

from unicache.policy.srm.colors import colors_round

__all__ = ["colors_round"]
