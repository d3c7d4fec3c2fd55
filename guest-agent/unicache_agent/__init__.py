"""unicache-agent: the guest half of unicache (reports reads up, writes placement tables down).

Standard library only, Python >= 3.9, so it runs on any guest with python3.
"""

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
