"""Latency per request, as serving benchmarks report it (specdec_bench's Timing, vLLM's bench serve):

    ttft    time to first token: request start to its first token (the prefill)
    tpot    time per output token after the first: (e2e - ttft) / (tokens - 1)
    e2e     request start to its last token
each over the requests as mean, std, P50, P95 and P99 (linear interpolation between order statistics,
numpy's default). Rows of one batch are requests that share their clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from framework.metrics.trace import RequestTrace

QUANTILES = (50, 95, 99)


def quantile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the order statistics (torch's default, as numpy's)."""
    return float(torch.quantile(torch.tensor(values, dtype=torch.float64), q / 100))


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """mean, std (population) and the QUANTILES of the values; None for none."""
    if not values:
        return None
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {"mean": mean, "std": std, **{f"p{q}": quantile(values, q) for q in QUANTILES}}


def latency_summary(traces: Sequence[RequestTrace]) -> dict[str, dict | None]:
    """ttft, tpot and e2e over the requests that have a clock (tpot: those with two tokens or more)."""
    ttft = [t.ttft_s for t in traces if t.ttft_s is not None]
    e2e = [t.e2e_s for t in traces if t.e2e_s is not None]
    tpot = [(t.e2e_s - t.ttft_s) / (t.tokens - 1) for t in traces
            if t.e2e_s is not None and t.ttft_s is not None and t.tokens > 1]
    return {"ttft_s": spread(ttft), "tpot_s": spread(tpot), "e2e_s": spread(e2e)}
