"""The unicache wire protocol's constants: version, limits, message types, error kinds.

docs/protocol.md "Constants" lists them (a test compares the two); the guest mirrors them
in ``guest-agent/unicache_agent/protocol.py``, its own copy because the agent ships to
guests alone, stdlib only (``tests/channel/test_channel_constants.py`` keeps the copies
equal).
"""

from __future__ import annotations

# a table entry's "no limit" is the model's, and on the wire too (docs/protocol.md)
from unicache.model import BUDGET_UNLIMITED as BUDGET_UNLIMITED

PROTOCOL_VERSION = 1
PORT_NAME = "org.unicache.agent.0"
#: a line (JSON text plus the newline) longer than this is dropped whole
MAX_LINE_BYTES = 131072
#: report chunks or placement entries in one message
MAX_ENTRIES_PER_MESSAGE = 1024
#: entries of one placement table (all its parts)
MAX_TABLE_ENTRIES = 8192
#: parts of one placement table
MAX_TABLE_PARTS = 8
#: (vcpu, bytes) pairs of one chunk; also the highest vCPU index + 1
MAX_VCPUS = 256
#: NUMA node ids in a report
MAX_NODES = 64
#: file-level records (fanotify capture) in one report
MAX_FILE_RECORDS = 1024
#: messages the host accepts per second from one guest (token bucket rate)
MAX_MESSAGES_PER_SECOND = 20
#: token bucket depth
RATE_BURST = 40
#: chunks the host keeps per VM between policy rounds
MAX_CHUNKS_PER_VM = 65536
#: error replies the host sends per second (more are counted, not sent)
MAX_ERRORS_PER_SECOND = 2
#: longest string field (agent name, capability, error message)
MAX_STRING = 256
#: capabilities in a hello
MAX_CAPS = 16
#: the byte that precedes a sync-ack; it never occurs in UTF-8 text
SYNC_BYTE = 0xFF
#: chunk sizes a table may use
MIN_CHUNK_SIZE = 4096
MAX_CHUNK_SIZE = 1 << 30
#: report interval bounds (seconds)
MIN_REPORT_INTERVAL_S = 0.1
MAX_REPORT_INTERVAL_S = 60.0
#: largest integer in a counter field
MAX_COUNTER = (1 << 63) - 1
#: largest chunk index
MAX_CHUNK_INDEX = (1 << 48) - 1

T_HELLO = "hello"
T_WELCOME = "welcome"
T_REPORT = "report"
T_APPLIED = "applied"
T_PLACEMENT = "placement"
T_PARAMS = "params"
T_COLORS = "colors"
T_REPLICAS = "replicas"
T_ERROR = "error"
T_SYNC = "sync"
T_SYNC_ACK = "sync-ack"
GUEST_TYPES = (T_HELLO, T_REPORT, T_APPLIED, T_ERROR, T_SYNC, T_SYNC_ACK)
HOST_TYPES = (T_WELCOME, T_PLACEMENT, T_PARAMS, T_COLORS, T_REPLICAS, T_ERROR, T_SYNC, T_SYNC_ACK)
#: types reserved for later tables; a receiver answers ``reserved-type``
RESERVED_TYPES = (T_COLORS, T_REPLICAS)

E_LINE_TOO_LONG = "line-too-long"
E_BAD_JSON = "bad-json"
E_BAD_MESSAGE = "bad-message"
E_UNKNOWN_TYPE = "unknown-type"
E_BAD_FIELD = "bad-field"
E_UNSUPPORTED_VERSION = "unsupported-version"
E_TOO_MANY_ENTRIES = "too-many-entries"
E_RATE_LIMITED = "rate-limited"
E_STATE_FULL = "state-full"
E_NOT_READY = "not-ready"
E_RESERVED_TYPE = "reserved-type"
ERROR_KINDS = (
    E_LINE_TOO_LONG,
    E_BAD_JSON,
    E_BAD_MESSAGE,
    E_UNKNOWN_TYPE,
    E_BAD_FIELD,
    E_UNSUPPORTED_VERSION,
    E_TOO_MANY_ENTRIES,
    E_RATE_LIMITED,
    E_STATE_FULL,
    E_NOT_READY,
    E_RESERVED_TYPE,
)

#: SRM-buffer color nodes in placement entries (docs/protocol.md "Capabilities")
CAP_COLORS = "colors"
#: NCC replica nodes in placement entries
CAP_REPLICAS = "replicas"
#: capabilities this host speaks
HOST_CAPS = ("report", "placement", "nt-copy", "fanotify", CAP_COLORS, CAP_REPLICAS)
