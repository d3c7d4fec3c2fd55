"""unicache-agent: the guest half of unicache (reports reads up, writes placement tables down).

Standard library only; written and type-checked as Python 3.9 code, tested on 3.11 only.
"""

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
