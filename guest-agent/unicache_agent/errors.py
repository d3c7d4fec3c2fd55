"""The error tree of the guest agent: one root, semantic subclasses.

::

    AgentError                root of everything the agent raises on purpose
     ├── UsageError           a flag's value, or a file a flag names, cannot be used (exit 2)
     ├── PortError            the virtio-serial port cannot be found or opened
     ├── ShmError             the shared table or counters cannot be created or written
     └── MessageError         a host message breaks the protocol; carries a stable ``kind``

Each error keeps ``error_message`` and renders as one line, "message: cause".
"""

from __future__ import annotations


class AgentError(Exception):
    """Root of every error the agent raises on purpose.

    :param error_message: what went wrong, one line.
    """

    def __init__(self, error_message: str) -> None:
        super().__init__(error_message)
        #: the one-line message shown to users
        self.error_message = error_message

    def __str__(self) -> str:
        cause = self.__cause__
        if cause is not None and not isinstance(cause, AgentError):
            return f"{self.error_message}: {cause}"
        return self.error_message


class UsageError(AgentError):
    """What the user gave cannot be used: a bad flag value, or a file named by a flag (or
    its environment variable) that cannot be created or opened. The command line reports
    it in one line with exit status 2; every other :class:`AgentError` exits 1."""


class PortError(AgentError):
    """The virtio-serial port is absent, cannot be opened or went away."""


class ShmError(AgentError):
    """The shared placement table or counters file cannot be used."""


class MessageError(AgentError):
    """A message from the host breaks the protocol; it is dropped and answered.

    :param kind: stable machine-readable kind (the same kinds as docs/protocol.md).
    """

    def __init__(self, error_message: str, kind: str) -> None:
        super().__init__(error_message)
        #: stable machine-readable kind
        self.kind = kind
