"""The error tree of the host package: one root, semantic subclasses.

::

    UnicacheError                 root of everything unicache raises on purpose
     ├── ConfigError              a user-supplied file, flag or option is wrong
     ├── TopologyError            sysfs or a machine model cannot be read or is inconsistent
     ├── TraceError               an observation trace cannot be read
     ├── StateError               an object is used in a state that does not allow it
     │                            (policies: a restored state that breaks an invariant)
     ├── ProtocolError            a peer (a guest) sent something that breaks the protocol
     │    └── GuestProtocolError  a guest message, dropped and answered with an error
     ├── PolicyRefusal            a policy refuses a request; carries a stable ``kind``
     ├── VmError                  a VM of unicache's own QEMU cannot be started or reached
     └── BenchError               a benchmark cannot run (shim not built, driver failed)

    OSError                       the operating system refused: callers retry by errno
     ├── PerfError                perf_event_open failed (carries the kernel's errno)
     └── UnsafeSocketError        a path to dial is not QEMU's socket: never connected to

Each UnicacheError keeps ``error_message`` and renders as one line, "message: cause". The
two OSError kinds stay OSErrors because the host's adapters treat every OSError alike (a
failed action, retried next round); they are defined here so that the tree is whole.
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

    @classmethod
    def restored(cls, error_message: str) -> StateError:
        """A policy's restored state that breaks one of its invariants (``start``)."""
        return cls(error_message, "restored", "consistent")


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
    #: the request asks for more memory than the NUMA nodes have left
    MEMORY_EXHAUSTED = "MEMORY_EXHAUSTED"
    #: CPUs and memory are free, but no LLC groups can hold the vCPUs as the guest's dies
    LLC_FRAGMENTED = "LLC_FRAGMENTED"

    def __init__(self, error_message: str, kind: str) -> None:
        super().__init__(error_message)
        #: stable machine-readable reason
        self.kind = kind


class GuestProtocolError(ProtocolError):
    """A guest message breaks the protocol; it is dropped and answered with an error.

    :param error_message: one line naming the problem.
    :param kind: one of ``unicache.channel.protocol.ERROR_KINDS``.
    :param seq: the offending message's ``seq`` when it could be read.
    """

    def __init__(self, error_message: str, kind: str, seq: int | None = None) -> None:
        super().__init__(error_message, kind)
        #: the offending message's seq, if known
        self.seq = seq


class VmError(UnicacheError):
    """A VM cannot be started, reached or stopped.

    :param vm: the VM's name.
    """

    def __init__(self, error_message: str, vm: str) -> None:
        super().__init__(f"vm {vm}: {error_message}")
        #: the VM concerned
        self.vm = vm


class BenchError(UnicacheError):
    """The benchmark cannot run (shim not built, driver failed)."""


class PerfError(OSError):
    """perf_event_open failed (carries errno)."""


class UnsafeSocketError(OSError):
    """A path to dial that is not QEMU's socket: refused, never connected to."""
