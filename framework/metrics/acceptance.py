"""Acceptance metrics, each named by its definition (the field disagrees about them: vLLM #42508).

Over the steps that drafted (a step that offered no draft is not a draft, as vLLM counts num_drafts):
    accepted_length_pooled       1 + sum(accepted) / steps, over every step of every request (vLLM, SGLang,
                                 AIPerf's "mean acceptance length": weighted by each request's steps)
    accepted_length_per_request  the mean over requests of each request's own 1 + accepted / steps
                                 (SpecForge's figure: every request weighs the same)
    marginal[i]                  P(the first i drafted tokens are all accepted) = #(accepted >= i) / steps
                                 (vLLM's "per-position acceptance rate"); 1 + sum(marginal) = pooled length
    conditional[i]               P(position i accepted | the first i - 1 were, and i was drafted)
    histogram                    steps by accepted count (and by drafted depth: adaptive depths change K)
    thinking / answer            the pooled length of the steps before the one that emits the end of the
                                 thinking span, and of those after it (specdec_bench's split)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from framework.metrics.trace import RequestTrace

TOLERANCE = 0.02  # pooled length against 1 + sum of marginals (NVIDIA's speculation profile check)


def drafting_steps(traces: Sequence[RequestTrace]) -> list[tuple[int, int]]:
    """(accepted, drafted) of every step that drafted, over every request."""
    return [(a, d) for t in traces for a, d in zip(t.accepted, t.drafted) if d > 0]


def pooled_length(steps: Sequence[tuple[int, int]]) -> float | None:
    return 1 + sum(a for a, _ in steps) / len(steps) if steps else None


def accepted_length_pooled(traces: Sequence[RequestTrace]) -> float | None:
    return pooled_length(drafting_steps(traces))


def accepted_length_per_request(traces: Sequence[RequestTrace]) -> float | None:
    means = [pooled_length(drafting_steps([t])) for t in traces]
    means = [m for m in means if m is not None]
    return sum(means) / len(means) if means else None


def depth_of(steps: Sequence[tuple[int, int]]) -> int:
    return max((d for _, d in steps), default=0)


def marginal(traces: Sequence[RequestTrace]) -> list[float]:
    """[K]: position i (from 1) accepted together with every position before it, per drafting step."""
    steps = drafting_steps(traces)
    return [sum(a >= i for a, _ in steps) / len(steps) for i in range(1, depth_of(steps) + 1)] if steps else []


def conditional(traces: Sequence[RequestTrace]) -> list[float | None]:
    """[K]: position i accepted given the first i - 1 were and position i was drafted (None: never reached)."""
    steps, out = drafting_steps(traces), []
    for i in range(1, depth_of(steps) + 1):
        reached = sum(a >= i - 1 and d >= i for a, d in steps)
        out.append(sum(a >= i for a, _ in steps) / reached if reached else None)
    return out


def histogram(traces: Sequence[RequestTrace]) -> dict[int, int]:
    """accepted count -> drafting steps."""
    return dict(sorted(Counter(a for a, _ in drafting_steps(traces)).items()))


def histogram_by_draft_length(traces: Sequence[RequestTrace]) -> dict[int, dict[int, int]]:
    """drafted depth -> (accepted count -> steps)."""
    out: dict[int, Counter] = {}
    for a, d in drafting_steps(traces):
        out.setdefault(d, Counter())[a] += 1
    return {d: dict(sorted(c.items())) for d, c in sorted(out.items())}


def thinking_split(traces: Sequence[RequestTrace]) -> dict[str, float | None] | None:
    """Pooled lengths inside the thinking span and after it, as specdec_bench's ThinkingAcceptance splits them:
    steps before the one whose tokens hold the end token think, steps after it answer, and that step counts in
    neither; a request that never closed its span thinks throughout. None when no request started thinking."""
    inside, after = [], []
    reasoning = [t for t in traces if t.thinking]
    if not reasoning:
        return None
    for t in reasoning:
        end = t.think_end if t.think_end is not None else float("inf")
        for a, d, e, start in t.steps():
            if d > 0 and not start <= end < start + e:
                (inside if start + e <= end else after).append((a, d))
    return {"thinking": pooled_length(inside), "answer": pooled_length(after),
            "thinking_steps": len(inside), "answer_steps": len(after)}


def consistency(traces: Sequence[RequestTrace]) -> list[str]:
    """What a sound trace must satisfy, each failure said in words (empty: all hold).
    Every step keeps its accepted drafts and one token of the target's, except a request's last (EOS or the
    budget may cut it); no step accepts more than it drafted; the pooled length is 1 + the sum of the
    marginals (within TOLERANCE) and the marginals never increase."""
    failures = []
    for r, t in enumerate(traces):
        for s, (a, d, e, _) in enumerate(t.steps()):
            last = s == len(t.accepted) - 1
            if a > d:
                failures.append(f"request {r} step {s}: accepted {a} of {d} drafted")
            if e > a + 1 or (not last and e != a + 1) or (last and e < 1):
                failures.append(f"request {r} step {s}: kept {e} tokens for {a} accepted (expected {a} + 1)")
    pooled, rates = accepted_length_pooled(traces), marginal(traces)
    if pooled is not None and abs(pooled - (1 + sum(rates))) > TOLERANCE:
        failures.append(f"pooled accepted length {pooled:.4f} != 1 + sum of marginals {1 + sum(rates):.4f}")
    if any(later > earlier for earlier, later in zip(rates, rates[1:])):
        failures.append(f"marginal acceptance increases with position: {rates}")
    return failures


def acceptance_summary(traces: Sequence[RequestTrace]) -> dict:
    """Every acceptance metric of a set of requests, and the consistency checks' failures."""
    return {"requests": len(traces), "drafting_steps": len(drafting_steps(traces)),
            "accepted_length_pooled": accepted_length_pooled(traces),
            "accepted_length_per_request": accepted_length_per_request(traces),
            "marginal": marginal(traces), "conditional": conditional(traces),
            "histogram": histogram(traces), "histogram_by_draft_length": histogram_by_draft_length(traces),
            "per_request_histograms": [histogram([t]) for t in traces],
            "thinking": thinking_split(traces), "consistency_failures": consistency(traces)}
