"""Incremental Server-Sent Events parsing (pure): bytes in, `data:` payloads out, across arbitrary chunking."""

from __future__ import annotations


class SseParser:
    """Feed it the body's chunks; it returns each complete event's data (multi-line data joined with newlines)."""

    def __init__(self, max_event_bytes: int = 16 * 1024 * 1024) -> None:
        self._buffer = b""
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        events: list[str] = []
        while True:
            end, sep_len = _event_end(self._buffer)
            if end < 0:
                if len(self._buffer) > self._max:
                    raise ValueError(f"an SSE event exceeds {self._max} bytes")
                return events
            raw, self._buffer = self._buffer[:end], self._buffer[end + sep_len :]
            data = [
                line[5:].removeprefix(b" ")
                for line in raw.replace(b"\r\n", b"\n").split(b"\n")
                if line.startswith(b"data:")
            ]
            if data:
                events.append(b"\n".join(data).decode())


def _event_end(buffer: bytes) -> tuple[int, int]:
    candidates = [(buffer.find(sep), len(sep)) for sep in (b"\n\n", b"\r\n\r\n")]
    found = [(i, n) for i, n in candidates if i >= 0]
    return min(found) if found else (-1, 0)
