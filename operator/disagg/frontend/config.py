"""The frontend's settings (pure data, built by the CLI)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .contract import EngineRole
from .flows import FlowName
from .selection import Policy, RevisionPolicy


@dataclass(frozen=True)
class FrontendConfig:
    flow: FlowName = "pull"
    render: bool = False
    """Render tier: OpenAI requests go render -> generate on --tokens-only engines -> derender."""
    prefill_policy: Policy = "round_robin"
    decode_policy: Policy = "round_robin"
    revision_policy: RevisionPolicy = "capacity"
    conversation_ttl: float = 450.0
    decoder_blocks_ttl: float = 480.0
    max_conversations: int = 100_000
    request_timeout: float = 600.0
    prefill_timeout: float = 300.0
    connect_timeout: float = 5.0
    max_connections_per_engine: int = 1024
    model: str | None = None
    """The served model name /v1/models reports when no engine answers it."""
    drain_seconds: float = 300.0
    """Default lifetime of a pair drain: long enough for the operator to act, short enough to retry the pair."""
    probe_prompt: str = "disagg probe"
    probe_max_tokens: int = 2
    selectors: dict[EngineRole, dict[str, str]] = field(default_factory=dict)
