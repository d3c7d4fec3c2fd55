"""Bounded line framing of the channel's byte stream (docs/protocol.md "Framing")."""

from __future__ import annotations

from unicache.channel.wire import (
    MAX_LINE_BYTES,
    SYNC_BYTE,
)
from unicache.errors import (
    GuestProtocolError as GuestProtocolError,  # the wire's error, re-exported
)


class LineFramer:
    """Bounded line framing; never holds more than ``max_line`` bytes of a partial line.

    A SYNC_BYTE drops the partial line (the peer resynchronises). Each overlong line yields
    one ``None`` and is skipped up to its newline. :meth:`feed` takes a line budget: past
    it, the rest of the data is dropped with C-speed scans only, so a flood of short lines
    or sync bytes costs the host no per-line Python work.

    :param max_line: the longest line accepted, newline included.
    """

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._max = max_line
        self._buf = bytearray()
        self._skipping = False

    @property
    def buffered(self) -> int:
        """Bytes of the partial line held now (always <= max_line)."""
        return len(self._buf)

    def feed(self, data: bytes, budget: int = 1 << 30) -> tuple[list[bytes | None], int]:
        """Add bytes; return up to ``budget`` lines and how many lines were dropped.

        :param data: bytes from the socket.
        :param budget: most lines to return (complete lines without newline, ``None`` for
            an overlong one); later complete lines in ``data`` are dropped and counted.
        :returns: (lines in order, lines dropped).
        """
        out: list[bytes | None] = []
        sync = bytes([SYNC_BYTE])
        pos, n, steps = 0, len(data), 0
        while pos < n:
            if len(out) >= budget or steps > budget + 64:
                return out, self._drop_rest(data, pos)
            steps += 1
            nl = data.find(b"\n", pos)
            ff = data.find(sync, pos, n if nl == -1 else nl)
            if ff != -1:
                # a SYNC_BYTE: drop the partial line before it, keep complete ones
                self._buf.clear()
                self._skipping = False
                pos = ff + 1
                continue
            end = n if nl == -1 else nl
            has_line, line = self._add(data[pos:end], complete=nl != -1)
            if has_line:
                out.append(line)
            pos = end + 1
        return out, 0

    def _add(self, piece: bytes, complete: bool) -> tuple[bool, bytes | None]:
        """Append to the partial line; return (whether a line is out, the line or None
        for an overlong one)."""
        out: tuple[bool, bytes | None] = (False, None)
        if not self._skipping:
            if len(self._buf) + len(piece) + (1 if complete else 0) > self._max:
                self._buf.clear()
                self._skipping = True
                out = (True, None)
            else:
                self._buf += piece
        if complete:
            if not self._skipping:
                out = (True, bytes(self._buf))
            self._buf.clear()
            self._skipping = False
        return out

    def _drop_rest(self, data: bytes, pos: int) -> int:
        last = max(data.rfind(b"\n", pos), data.rfind(bytes([SYNC_BYTE]), pos))
        dropped = 0
        if last != -1:
            dropped = data.count(b"\n", pos, last + 1)
            self._buf.clear()
            self._skipping = False
            pos = last + 1
        tail = data[pos:]
        if not self._skipping:
            if len(self._buf) + len(tail) > self._max:
                self._buf.clear()
                self._skipping = True
                dropped += 1
            else:
                self._buf += tail
        return dropped
