"""Every metric on a trace whose answers were worked out by hand (below), and a planted off-by-one caught.

Request A (thinking; its end token at output index 5), steps (accepted, drafted, kept):
    (2,3,3) (0,3,1) (3,3,4) (1,3,2)         first tokens 1, starts at 1, 4, 5, 9; 11 tokens
Request B (thinking; end token at 4): (1,2,2) (2,2,3) (0,0,1) (2,4,2)   starts at 1, 3, 6, 7; the third drafted
    nothing; the last cut by the budget; 9 tokens
Drafting steps: 7, accepted 11 -> pooled 1 + 11/7; per request: A 1 + 6/4, B 1 + 5/3.
marginal: #(a >= i) / 7 = 6/7, 4/7, 1/7, 0/7
conditional: 6/7; 4 of 6 reached (a >= 1, d >= 2); 1 of 3 reached (a >= 2, d >= 3); position 4 never reached
thinking: the step holding the end token counts in neither (A's third, B's second); before it A (2, 0), B (1):
    1 + 3/3; after it A (1), B (2) (B's plain step drafted nothing): 1 + 3/2
latency: A ttft 0.1, e2e 1.1 -> tpot 1.0 / 10; B ttft 0.3, e2e 1.9 -> tpot 1.6 / 8
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from framework.metrics.acceptance import acceptance_summary, consistency
from framework.metrics.latency import latency_summary, quantile
from framework.metrics.profile import speculation_profile, validation
from framework.metrics.trace import RequestTrace, request_traces
from proposers.draft_model import DraftModelProposer

A = RequestTrace((2, 0, 3, 1), (3, 3, 3, 3), (3, 1, 4, 2), 1, 0.1, 1.1, think_end=5, thinking=True)
B = RequestTrace((1, 2, 0, 2), (2, 2, 0, 4), (2, 3, 1, 2), 1, 0.3, 1.9, think_end=4, thinking=True)
HAND = {
    "accepted_length_pooled": 1 + 11 / 7,
    "accepted_length_per_request": ((1 + 6 / 4) + (1 + 5 / 3)) / 2,
    "marginal": [6 / 7, 4 / 7, 1 / 7, 0.0],
    "conditional": [6 / 7, 4 / 6, 1 / 3, None],
    "histogram": {0: 1, 1: 2, 2: 3, 3: 1},
    "histogram_by_draft_length": {2: {1: 1, 2: 1}, 3: {0: 1, 1: 1, 2: 1, 3: 1}, 4: {2: 1}},
    "thinking": {"thinking": 1 + 3 / 3, "answer": 1 + 3 / 2, "thinking_steps": 3, "answer_steps": 2},
    "drafting_steps": 7,
}


def close(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12)
    return a == b


def mismatches(summary: dict) -> list[str]:
    return [k for k, v in HAND.items() if not close(summary[k], v)]


def test_every_acceptance_metric_matches_the_hand_computed_trace():
    summary = acceptance_summary([A, B])
    assert mismatches(summary) == []
    assert summary["consistency_failures"] == []
    assert summary["per_request_histograms"] == [{0: 1, 1: 1, 2: 1, 3: 1}, {1: 1, 2: 2}]
    assert A.tokens == 11 and B.tokens == 9


def bonus_counted_twice(trace: RequestTrace) -> RequestTrace:
    """The planted off-by-one: a trace writer that counts the target's own token among the accepted ones."""
    return replace(trace, accepted=tuple(a + 1 for a in trace.accepted))


def test_the_bonus_counted_twice_is_caught_by_the_hand_trace_and_by_the_consistency_checks():
    planted = [bonus_counted_twice(A), bonus_counted_twice(B)]
    wrong = mismatches(acceptance_summary(planted))
    assert "accepted_length_pooled" in wrong and "accepted_length_per_request" in wrong and "marginal" in wrong
    failures = consistency(planted)
    assert any("accepted 4 of 3 drafted" in f for f in failures)
    assert any("kept 3 tokens for 3 accepted" in f for f in failures)


def test_consistency_names_increasing_marginals_and_a_pooled_length_off_the_marginals():
    # a step that accepted more than the tree's depth (a broken writer) leaves the marginals short of the pooled length
    broken = RequestTrace((3, 0), (2, 2), (4, 1))
    failures = consistency([broken])
    assert any("pooled accepted length" in f for f in failures)
    assert consistency([RequestTrace((0, 1), (1, 1), (1, 2))]) == []


def test_latency_percentiles_are_linear_between_order_statistics():
    summary = latency_summary([A, B])
    assert close(summary["ttft_s"], {"mean": 0.2, "std": 0.1, "p50": 0.2, "p95": 0.1 + 0.2 * 0.95,
                                     "p99": 0.1 + 0.2 * 0.99})
    assert close(summary["tpot_s"]["p50"], (0.1 + 0.2) / 2) and close(summary["tpot_s"]["mean"], 0.15)
    assert close(summary["e2e_s"]["p99"], 1.1 + 0.8 * 0.99)
    assert quantile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert latency_summary([RequestTrace((), (), ())])["ttft_s"] is None


def test_a_trace_without_steps_or_with_uneven_counts():
    assert acceptance_summary([RequestTrace((), (), ())])["accepted_length_pooled"] is None
    with pytest.raises(ValueError, match="one accepted, drafted and emitted count per step"):
        RequestTrace((1,), (1, 2), (2,))


@pytest.mark.parametrize("batch", [1, 3])
def test_the_engines_traces_are_consistent_and_count_every_token(batch):
    torch.manual_seed(0)
    target_model = tiny_random_model(seed=1, init_std=0.3)
    draft_model = tiny_random_model(seed=2, num_layers=1, init_std=0.3)
    prompt = torch.randint(0, 64, (batch, 6))
    out = generate(HFTarget(target_model), DraftModelProposer(draft_model, depth=3), prompt, 20,
                   SamplingConfig(temperature=1.0), seed=0)
    rows = [[t for t in row if t >= 0] for row in out.tokens.tolist()]
    traces = request_traces(out.stats.steps, batch, rows, 0.1, 1.0)
    assert consistency(traces) == []
    assert [t.tokens for t in traces] == [20] * batch
    assert all(set(t.drafted) <= {0, 1, 2, 3} and max(t.drafted) == 3 for t in traces)
    summary = acceptance_summary(traces)
    assert math.isclose(summary["accepted_length_pooled"], 1 + out.stats.accepted_total /
                        sum(int((s.drafted > 0).sum()) for s in out.stats.steps))


def test_the_speculation_profile_has_specdec_bench_conventions():
    profile = speculation_profile({"c1": [A], "c2": [B]}, "draft", {"name": "t"}, {"name": "d"}, "token", {"batch": 1})
    assert profile["schema_version"] == "1.0" and profile["measured"] and profile["num_speculative_tokens"] == 4
    assert close(profile["marginal_accept_rates"], [round(x, 6) for x in (6 / 7, 4 / 7, 1 / 7, 0.0)])
    assert close(profile["conditional_accept_rates"], [round(x, 6) for x in (6 / 7, 2 / 3, 1 / 4, 0.0)])
    assert close(profile["mean_accept_length"], 1 + 11 / 7)
    assert profile["acceptance_length_histogram"] == {"1": 1, "2": 2, "3": 3, "4": 1}  # lengths count the bonus
    assert close(profile["accept_length_by_k"], {"2": 2.5, "3": 2.5, "4": 3.0})
    assert close(profile["per_category"]["c1"]["mean_accept_length"], 2.5)
    assert (profile["validation"]["mean_consistency"]["passed"]
            and profile["validation"]["marginal_monotonicity"]["passed"])
    assert not validation([0.5, 0.6], 2.1)["marginal_monotonicity"]["passed"]
    assert not validation([0.5, 0.4], 2.5)["mean_consistency"]["passed"]
