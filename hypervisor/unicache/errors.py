"""The error tree of the host package: one root, semantic subclasses.

::

    UnicacheError                 root of everything unicache raises on purpose
     ├── ConfigError              a user-supplied file, flag or option is wrong
     ├── TopologyError            sysfs or a machine model cannot be read or is inconsistent
     ├── TraceError               an observation trace cannot be read
     ├── StateError               an object is used in a state that does not allow it
     ├── ProtocolError            a peer (a guest) sent something that breaks the protocol
     └── PolicyRefusal            a policy refuses a request; carries a stable ``kind``

Each error keeps ``error_message`` and renders as one line, "message: cause".
"""

from __future__ import annotations


class UnicacheError(Exception):
    """Root of every error unicache raises on purpose.

    :param error_message: what went wrong, one line, without a trailing period.
    """

    def __init__(self, error_message: str) -> None:
        super().__init__(error_message)
        #: the one-line message shown to users
        self.error_message = error_message

    def __str__(self) -> str:
        cause = self.__cause__
        if isinstance(cause, OSError) and cause.strerror:
            # the message already names the file; errno's text is what is new
            return f"{self.error_message}: {cause.strerror}"
        if cause is not None and not isinstance(cause, UnicacheError):
            return f"{self.error_message}: {cause}"
        return self.error_message


class ConfigError(UnicacheError):
    """A configuration file, command-line flag or option value is invalid."""


class TopologyError(UnicacheError):
    """The machine topology cannot be discovered, loaded or is inconsistent."""


class TraceError(UnicacheError):
    """An observation trace cannot be opened or read as a whole."""


class StateError(UnicacheError):
    """An object is used in a state that does not allow the operation.

    :param state: the state the object is in.
    :param required: the state the operation needs.
    """

    def __init__(self, error_message: str, state: str, required: str) -> None:
        super().__init__(f"{error_message} (state {state}, requires {required})")
        #: the current state
        self.state = state
        #: the state the operation requires
        self.required = required


class ProtocolError(UnicacheError):
    """A guest sent a message that violates the protocol; the message is dropped.

    :param kind: stable machine-readable kind (e.g. ``line-too-long``).
    """

    def __init__(self, error_message: str, kind: str) -> None:
        super().__init__(error_message)
        #: stable machine-readable kind, used in error replies and metrics
        self.kind = kind


class PolicyRefusal(UnicacheError):
    """A policy cannot satisfy a request (e.g. no cache unit has room).

    :param kind: stable machine-readable reason, e.g. ``LLC_EXHAUSTED``.
    """

    #: no cache unit has capacity left for the request
    LLC_EXHAUSTED = "LLC_EXHAUSTED"
    #: the request asks for more vCPUs than there are CPUs to place them on
    CPUS_EXHAUSTED = "CPUS_EXHAUSTED"

    def __init__(self, error_message: str, kind: str) -> None:
        super().__init__(error_message)
        #: stable machine-readable reason
        self.kind = kind
