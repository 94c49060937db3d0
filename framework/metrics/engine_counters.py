"""Speculative-decoding counters as production engines keep them, in our definitions (framework.metrics.acceptance).

vLLM counts, over the steps that drafted (its `vllm:spec_decode_*` counters):
    drafts                   steps that offered a draft
    draft_tokens             tokens drafted over those steps
    accepted                 drafted tokens accepted (the bonus / recovered token is not one)
    accepted_per_position[i] steps whose drafted tokens 0..i were all accepted (a chain accepts a prefix)
Its mean acceptance length is 1 + accepted / drafts: our accepted_length_pooled. The same counters are read off
our traces (`of_traces`), so an engine's figure and ours are one computation on like data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from framework.metrics.acceptance import drafting_steps
from framework.metrics.trace import RequestTrace


@dataclass(frozen=True)
class EngineCounters:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_position: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        per_position = self.accepted_per_position
        if min(self.drafts, self.draft_tokens, self.accepted, *per_position, 0) < 0:
            raise ValueError(f"engine counters must be >= 0, got {self}")
        if self.accepted > self.draft_tokens:
            raise ValueError(f"engine counters: {self.accepted} accepted of {self.draft_tokens} drafted")
        if per_position and sum(per_position) != self.accepted:
            raise ValueError(f"engine counters: accepted per position {list(per_position)} sum to "
                             f"{sum(per_position)}, not to the {self.accepted} accepted")
        if any(later > earlier for earlier, later in zip(per_position, per_position[1:])):
            raise ValueError(f"engine counters: accepted per position grows with position: {list(per_position)} "
                             "(a chain accepts a prefix)")
        if per_position and per_position[0] > self.drafts:
            raise ValueError(f"engine counters: {per_position[0]} steps accepted position 0 of {self.drafts} drafts")

    def __add__(self, other: EngineCounters) -> EngineCounters:
        a, b = self.accepted_per_position, other.accepted_per_position
        width = max(len(a), len(b))
        a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
        return EngineCounters(self.drafts + other.drafts, self.draft_tokens + other.draft_tokens,
                              self.accepted + other.accepted, tuple(x + y for x, y in zip(a, b)))

    def __sub__(self, before: EngineCounters) -> EngineCounters:
        """What happened between two readings of cumulative counters."""
        a, b = self.accepted_per_position, before.accepted_per_position
        b = b + (0,) * (len(a) - len(b))
        if len(b) > len(a):
            raise ValueError(f"engine counters went back: {before} then {self}")
        return EngineCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                              self.accepted - before.accepted, tuple(x - y for x, y in zip(a, b)))

    @property
    def mean_acceptance_length(self) -> float | None:
        """vLLM's and AIPerf's: 1 + accepted / drafts (bonus included); our accepted_length_pooled."""
        return 1 + self.accepted / self.drafts if self.drafts else None

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    def marginal(self) -> list[float]:
        """Our framework.metrics.acceptance.marginal: P(positions 1..i all accepted) per drafting step."""
        return [n / self.drafts for n in self.accepted_per_position] if self.drafts else []

    def histogram(self) -> dict[int, int]:
        """accepted count -> drafting steps. Exact for prefix acceptance: steps with exactly j accepted are those
        that accepted position j - 1 but not j."""
        counts = (self.drafts, *self.accepted_per_position, 0)
        return {j: counts[j] - counts[j + 1] for j in range(len(counts) - 1) if counts[j] - counts[j + 1]}

    def summary(self) -> dict:
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "accepted_per_position": list(self.accepted_per_position),
                "mean_acceptance_length": self.mean_acceptance_length, "acceptance_rate": self.acceptance_rate,
                "marginal": self.marginal(), "histogram": self.histogram()}

    @classmethod
    def of(cls, data: dict) -> EngineCounters:
        return cls(data["drafts"], data["draft_tokens"], data["accepted"], tuple(data["accepted_per_position"]))

    @classmethod
    def of_traces(cls, traces: Sequence[RequestTrace]) -> EngineCounters:
        """The counters an engine would have kept over our requests (a tree's accepted path counts as its chain)."""
        steps = drafting_steps(traces)
        depth = max((a for a, _ in steps), default=0)
        return cls(len(steps), sum(d for _, d in steps), sum(a for a, _ in steps),
                   tuple(sum(a > i for a, _ in steps) for i in range(depth)))
