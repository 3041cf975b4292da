"""Conversation state for bidirectional multi-turn (pure: the clock is an argument).

conversation id -> the `kv_transfer_params` decode returned at the end of the last turn (which decode engine holds
the turn's blocks, and which blocks). The next turn's prefill reads them back instead of recomputing the history.

- Each entry is used once: decode frees the blocks after prefill has read them, so a second use would point at
  freed blocks. A turn that finds no entry (first turn, expired, used, or frontend restarted) runs a plain pull.
- Entries expire `ttl` seconds after they were stored, and `ttl` must stay below decode's `decoder_kv_blocks_ttl`
  (480 s by default, not renewed): past it decode has freed the blocks and a readback would fail.
- At most `capacity` entries: the oldest goes first, so memory is bounded whatever clients send. Entries are kept
  in insertion order, which with one TTL is also expiry order, so expiry pops from the front in O(expired).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_DECODER_BLOCKS_TTL = 480.0
"""vLLM's `decoder_kv_blocks_ttl` default (seconds)."""
DEFAULT_TTL = 450.0
"""Below the default block TTL with a margin for the turn's own latency (vLLM's multi-turn proxy uses 450 s)."""


@dataclass(frozen=True)
class Conversation:
    params: dict[str, Any]
    decode_key: str
    decode_engine_id: str | None
    decode_host: str | None
    expires_at: float


class ConversationStore:
    def __init__(
        self, ttl: float = DEFAULT_TTL, capacity: int = 100_000, blocks_ttl: float = DEFAULT_DECODER_BLOCKS_TTL
    ):
        if ttl <= 0 or capacity <= 0:
            raise ValueError("conversation ttl and capacity must be positive")
        if ttl >= blocks_ttl:
            raise ValueError(
                f"conversation ttl ({ttl:g} s) must stay below decode's decoder_kv_blocks_ttl ({blocks_ttl:g} s): "
                "decode frees a conversation's blocks after that, and a readback of freed blocks fails"
            )
        self.ttl = ttl
        self.capacity = capacity
        self._entries: OrderedDict[str, Conversation] = OrderedDict()
        self.evicted = 0
        self.expired = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, conversation_id: str, params: Mapping[str, Any], decode_key: str, now: float) -> None:
        """Keep decode's final params for the next turn (replacing an older entry of the same conversation)."""
        self._entries.pop(conversation_id, None)
        engine_id = params.get("remote_engine_id")
        host = params.get("remote_host")
        self._entries[conversation_id] = Conversation(
            dict(params),
            decode_key,
            engine_id if isinstance(engine_id, str) else None,
            host if isinstance(host, str) else None,
            now + self.ttl,
        )
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
            self.evicted += 1

    def take(self, conversation_id: str, now: float) -> Conversation | None:
        """The conversation's entry, removed (single use), or None when there is none or it has expired."""
        self.expire(now)
        return self._entries.pop(conversation_id, None)

    def drop(self, conversation_id: str) -> None:
        self._entries.pop(conversation_id, None)

    def expire(self, now: float) -> int:
        count = 0
        while self._entries:
            first = next(iter(self._entries.values()))
            if first.expires_at > now:
                break
            self._entries.popitem(last=False)
            count += 1
        self.expired += count
        return count
