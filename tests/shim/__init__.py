"""Tests of the guest side (agent, shim) and the host channel.

The guest agent is not installed on the host: its package is imported from guest-agent/.
"""

import sys
from pathlib import Path

_GUEST_AGENT = str(Path(__file__).resolve().parents[2] / "guest-agent")
if _GUEST_AGENT not in sys.path:
    sys.path.insert(0, _GUEST_AGENT)
