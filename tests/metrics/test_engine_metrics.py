"""Engine counters (vLLM's spec_decode counters) and the engine-neutral per-request record (AIPerf's
SpecDecodeAcceptanceRecord) on the hand-computed traces of test_metrics, against the figures worked out there:

A: steps (accepted, drafted) (2,3) (0,3) (3,3) (1,3); B: (1,2) (2,2) (0,0: no draft) (2,4).
Drafting steps 7, drafted 12 + 8 = 20, accepted 11; steps with >= 1, 2, 3 accepted: 6, 4, 1;
histogram {0: 1, 1: 2, 2: 3, 3: 1}; vLLM's mean acceptance length 1 + 11/7 (our pooled length).
A's record: 4 steps, 6 of 12 accepted, length 2.5, rate 0.5, 11 completion tokens.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from framework.metrics.acceptance import acceptance_summary
from framework.metrics.engine_counters import EngineCounters
from framework.metrics.engine_record import acceptance_record, counters_record, record_failures
from framework.metrics.trace import RequestTrace
from tests.metrics.test_metrics import A, B

RECORDED = [Path(__file__).resolve().parents[1] / "peers" / f"vllm_{name}.jsonl" for name in ("ngram", "eagle3")]


def test_counters_read_off_our_traces_match_the_hand_figures():
    counters = EngineCounters.of_traces([A, B])
    assert counters == EngineCounters(drafts=7, draft_tokens=20, accepted=11, accepted_per_position=(6, 4, 1))
    assert counters.mean_acceptance_length == pytest.approx(1 + 11 / 7)
    assert counters.acceptance_rate == pytest.approx(11 / 20)
    assert counters.histogram() == {0: 1, 1: 2, 2: 3, 3: 1}
    assert counters.marginal() == pytest.approx([6 / 7, 4 / 7, 1 / 7])


def test_counters_and_our_acceptance_metrics_are_one_definition_on_random_traces():
    """An independent computation (framework.metrics.acceptance over the steps) gives the same pooled length,
    marginals and histogram as the engine's counters read off the same traces."""
    rng = random.Random(0)
    for _ in range(200):
        traces = []
        for _ in range(rng.randint(1, 4)):
            drafted = [rng.choice([0, 1, 3, 4, 5]) for _ in range(rng.randint(1, 8))]
            accepted = [rng.randint(0, d) for d in drafted]
            traces.append(RequestTrace(tuple(accepted), tuple(drafted), tuple(a + 1 for a in accepted)))
        ours, counters = acceptance_summary(traces), EngineCounters.of_traces(traces)
        assert counters.mean_acceptance_length == ours["accepted_length_pooled"]
        assert counters.marginal() == pytest.approx(ours["marginal"][: len(counters.marginal())])
        assert all(m == 0 for m in ours["marginal"][len(counters.marginal()):])
        assert counters.histogram() == ours["histogram"]


def test_counters_subtract_add_and_refuse_what_no_engine_can_count():
    before = EngineCounters(3, 12, 5, (3, 2))
    after = EngineCounters(10, 40, 20, (9, 6, 3, 2))
    assert after - before == EngineCounters(7, 28, 15, (6, 4, 3, 2))
    assert before + (after - before) == after
    with pytest.raises(ValueError, match="grows with position"):
        EngineCounters(5, 20, 5, (1, 4))
    with pytest.raises(ValueError, match="sum to"):
        EngineCounters(5, 20, 6, (4, 1))
    with pytest.raises(ValueError, match="accepted of"):
        EngineCounters(5, 4, 5, (5,))
    with pytest.raises(ValueError, match="went back"):
        before - after


def test_the_record_of_a_request_holds_the_hand_figures_and_its_identities():
    record = acceptance_record(A)
    assert record["mean_acceptance_length"] == 2.5 and record["draft_acceptance_rate"] == 0.5
    assert record["acceptance_histogram"] == {0: 1, 1: 1, 2: 1, 3: 1}
    assert (record["num_spec_steps"], record["num_accepted_draft_tokens"], record["num_draft_tokens"]) == (4, 6, 12)
    assert record["completion_tokens"] == 11 and record["per_step_accepted"] == [2, 0, 3, 1]
    assert record_failures(record) == []
    b = acceptance_record(B)  # its step that drafted nothing is no speculative step
    assert b["num_spec_steps"] == 3 and b["per_step_drafted"] == [2, 2, 4] and record_failures(b) == []


@pytest.mark.parametrize("plant, words", [
    (lambda r: r["acceptance_histogram"].update({0: 2}), "sum to"),
    (lambda r: r["acceptance_histogram"].update({3: 0, 2: 2}), "j-weighted"),
    (lambda r: r.update(num_draft_tokens=5), "accepted of"),
    (lambda r: r.update(per_step_accepted=[2, 0, 3, 0]), "do not sum"),
])
def test_each_broken_identity_is_named(plant, words):
    record = acceptance_record(A)
    plant(record)
    assert any(words in failure for failure in record_failures(record))


def recorded_counters() -> list[EngineCounters]:
    answers = [json.loads(line)["answer"] for path in RECORDED for line in path.read_text().splitlines()]
    return [EngineCounters.of(a["counters"]) for a in answers if "counters" in a]


def test_recorded_vllm_counters_make_valid_records_with_vllms_own_mean():
    """vLLM's counters over real generations (recorded from the live worker): its mean acceptance length is
    1 + accepted / drafts, the histogram derived from its per-position counts satisfies the record's identities."""
    counted = [c for c in recorded_counters() if c.drafts]
    assert counted, "the recording holds speculative runs"
    for counters in counted:
        record = counters_record(counters, "vllm", num_spec_tokens=len(counters.accepted_per_position))
        assert record_failures(record) == []
        assert record["mean_acceptance_length"] == pytest.approx(1 + counters.accepted / counters.drafts)
        assert sum(record["acceptance_histogram"].values()) == counters.drafts
