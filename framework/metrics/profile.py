"""A cell's acceptance as a `speculation_profile.json`, in the shape NVIDIA's specdec_bench writes (schema 1.0),
which Model-Optimizer copies into exported checkpoints and from which simulators take their rates (Dynamo's
mocker the conditional ones, vLLM's synthetic sampler the marginal ones).

Its conventions, kept here: K entries per rate vector; conditional[i] = marginal[i] / marginal[i - 1] (the
first against 1); acceptance lengths count the target's own token (a step that accepted a drafts has length
a + 1); validation: 1 + sum(marginal) against the mean length (0.02) and marginals that never increase.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from framework.metrics.acceptance import (
    TOLERANCE,
    accepted_length_per_request,
    accepted_length_pooled,
    drafting_steps,
    histogram,
    marginal,
    pooled_length,
)
from framework.metrics.trace import RequestTrace

SCHEMA_VERSION = "1.0"


def chained(rates: Sequence[float]) -> list[float]:
    """Conditional rates from marginal ones: each position given the one before (0 where that one never passed)."""
    return [m / before if before else 0.0 for m, before in zip(rates, [1.0, *rates])]


def validation(rates: Sequence[float], mean: float | None) -> dict:
    implied = 1 + sum(rates)
    delta = abs(implied - mean) if mean is not None else None
    violations = [{"position": i, "value": v, "previous": rates[i - 1]} for i, v in enumerate(rates)
                  if i and v > rates[i - 1] + 1e-9]
    return {"mean_consistency": {"implied_mean_accept_length": implied, "reported_mean_accept_length": mean,
                                 "abs_delta": delta, "tolerance": TOLERANCE,
                                 "passed": delta is not None and delta <= TOLERANCE},
            "marginal_monotonicity": {"passed": not violations, "violations": violations}}


def speculation_profile(by_category: Mapping[str, Sequence[RequestTrace]], method: str, target: dict, draft: dict,
                        verification: str, conditions: dict) -> dict:
    """The profile of a method's requests, grouped by category (every category pooled for the top level)."""
    traces = [t for group in by_category.values() for t in group]
    rates = [round(r, 6) for r in marginal(traces)]
    mean = accepted_length_pooled(traces)
    steps = drafting_steps(traces)
    by_k = {str(k): pooled_length([(a, d) for a, d in steps if d == k]) for k in sorted({d for _, d in steps})}
    return {
        "schema_version": SCHEMA_VERSION, "measured": bool(steps), "method": method,
        "draft_checkpoint": draft, "target_model": target, "num_speculative_tokens": len(rates),
        "block_size": None, "max_supported_k": len(rates), "verification_method": verification,
        "conditional_accept_rates": [round(c, 6) for c in chained(rates)], "marginal_accept_rates": rates,
        "mean_accept_length": mean, "mean_accept_length_per_request": accepted_length_per_request(traces),
        "accept_length_model": "measured_per_k", "accept_length_by_k": by_k,
        "acceptance_length_histogram": {str(a + 1): n for a, n in histogram(traces).items()},
        "per_category": {c: {"mean_accept_length": accepted_length_pooled(g),
                             "mean_accept_length_per_request": accepted_length_per_request(g),
                             "marginal_accept_rates": [round(r, 6) for r in marginal(g)]}
                         for c, g in by_category.items()},
        "measurement_conditions": conditions,
        "validation": validation(rates, mean) if rates else None,
    }
