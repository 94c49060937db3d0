"""Continuous batching (engine/scheduler.py): arrivals, the concurrency cap, per-request times, cancellation and
bad requests; a planted join bug caught by the scheduled law (every method:
tests/proposers/test_proposer_contract.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from engine.loop import generate
from engine.scheduler import AllAtOnce, FixedRate, Poisson, Request, Scheduler
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.ragged import check_scheduled_law
from proposers import DraftModelProposer

GREEDY = SamplingConfig(temperature=0)
PROMPTS = [[5, 9, 2, 7, 11, 3, 8, 1, 2, 40, 3, 9, 30, 2, 11, 5, 6, 7, 8, 10], [7, 7], [3, 1, 4], [2]]


class FakeClock:
    """Time that moves only when asked: each reading adds `tick` seconds; sleeping jumps ahead."""

    def __init__(self, tick: float = 0.01):
        self.t, self.tick, self.slept = 0.0, tick, []

    def __call__(self) -> float:
        self.t += self.tick
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


@pytest.fixture(scope="module")
def model():
    return tiny_random_model("llama", dtype="float64")


def alone(model, prompt, budget):
    return generate(HFTarget(model), None, [prompt], budget, GREEDY).tokens[0].tolist()


def test_arrival_processes():
    assert AllAtOnce().times(3) == [0.0, 0.0, 0.0]
    assert FixedRate(4.0).times(3) == [0.0, 0.25, 0.5]
    times = Poisson(2.0, seed=3).times(400)
    gaps = torch.tensor(times).diff()
    assert times[0] == 0.0 and bool((gaps >= 0).all()) and abs(float(gaps.mean()) - 0.5) < 0.1  # rate 2: mean gap 0.5 s
    assert Poisson(2.0, seed=3).times(5) == times[:5]  # seeded
    with pytest.raises(ValueError, match="rate must be > 0"):
        FixedRate(0.0)


def test_late_arrivals_wait_and_each_request_is_timed(model):
    """Requests at 0, 0.5 and 1 s (fake clock): the scheduler sleeps until each arrives; TTFT, TPOT and latency are
    read from the times it logged, and every request still decodes as alone."""
    clock = FakeClock()
    runner = Scheduler(model, None, GREEDY, max_batch=4, clock=clock, sleep=clock.sleep)
    times = FixedRate(2.0).times(3)
    done = runner.run([Request(p, 6, t) for p, t in zip(PROMPTS, times)])
    assert [f.tokens for f in done] == [alone(model, p, 6) for p in PROMPTS[:3]]
    assert clock.slept and all(s > 0 for s in clock.slept)
    for f in done:
        assert f.arrival_s <= f.admitted_s < f.first_token_s <= f.end_s
        assert f.ttft_s == pytest.approx(f.first_token_s - f.arrival_s)
        assert f.latency_s == pytest.approx(f.end_s - f.arrival_s)
        assert f.tpot_s == pytest.approx((f.end_s - f.first_token_s) / 5)


def test_the_cap_holds_and_queued_requests_join_as_others_end(model):
    draft = tiny_random_model("llama", dtype="float64", seed=1)
    runner = Scheduler(model, lambda: DraftModelProposer(draft, depth=2), GREEDY, max_batch=2)
    budgets = [12, 3, 5, 9]
    done = runner.run([Request(p, b) for p, b in zip(PROMPTS, budgets)])
    assert [f.tokens for f in done] == [alone(model, p, b) for p, b in zip(PROMPTS, budgets)]
    assert max(s.decoding for s in runner.steps) == 2
    joined = [s for s in runner.steps if 0 < s.admitted < s.decoding]
    assert joined and joined[0].prefill_tokens == len(PROMPTS[2])  # the third request joins when the second ends


def test_a_cancelled_request_leaves_and_the_others_are_unharmed(model):
    def cancel_after_two_steps(runner):
        if len(runner.steps) == 2:
            runner.cancel("b")
            runner.cancel("d")  # still queued: it never starts

    runner = Scheduler(model, None, GREEDY, max_batch=3, on_step=cancel_after_two_steps)
    ids = ["a", "b", "c", "d"]
    done = runner.run([Request(p, 8, 0.0 if i != "d" else 60.0, i) for p, i in zip(PROMPTS, ids)])
    by_id = {f.id: f for f in done}
    assert by_id["b"].cancelled and 0 < len(by_id["b"].tokens) < 8
    assert by_id["d"].cancelled and by_id["d"].tokens == [] and by_id["d"].first_token_s is None
    for i, p in zip(ids, PROMPTS):
        if i in ("a", "c"):
            assert not by_id[i].cancelled and by_id[i].tokens == alone(model, p, 8)


@pytest.mark.parametrize("request_, message", [
    (Request([], 4), "empty"),
    (Request([1] * 250, 10), "context of 256"),
    (Request([1, 2], -1), "max_new_tokens"),
    (Request([1, 99], 4), r"ids must lie in \[0, 64\)"),
    (Request([1, 2], 4, -1.0), "arrival_s"),
])
def test_a_bad_request_is_named_at_submission(model, request_, message):
    runner = Scheduler(model, None, GREEDY)
    with pytest.raises(ValueError, match=message):
        runner.submit(request_)
    assert runner.queue == []


def test_a_request_submitted_twice_and_a_bad_cap_are_named(model):
    runner = Scheduler(model, None, GREEDY)
    runner.submit(Request([1, 2], 3, id="x"))
    with pytest.raises(ValueError, match="'x' was already submitted"):
        runner.submit(Request([1, 2], 3, id="x"))
    with pytest.raises(ValueError, match="no request 'y'"):
        runner.cancel("y")
    with pytest.raises(ValueError, match="max_batch"):
        Scheduler(model, None, GREEDY, max_batch=0)


def test_one_prompt_twice_is_two_independent_requests(model):
    done = Scheduler(model, None, GREEDY, max_batch=2).run([Request(PROMPTS[2], 5), Request(PROMPTS[2], 5)])
    assert done[0].tokens == done[1].tokens == alone(model, PROMPTS[2], 5)


class HolesSeen(HFTarget):
    """Planted: a join that marks the holes after the shorter side's slots as committed tokens."""

    def join(self, other):
        super().join(other)
        self.lm.valid = torch.ones_like(self.lm.valid)
        self.lm.length = self.lm.valid.sum(1)


def test_the_scheduled_law_catches_a_join_that_shows_holes():
    """The requests experiments.check's ragged check schedules, on its toy target."""
    conf = Path(__file__).resolve().parents[2] / "conf"
    check = OmegaConf.load(conf / "experiment" / "check.yaml")
    target = instantiate(OmegaConf.load(conf / "target" / "toy.yaml"))  # models=toy's
    requests, cap, eos, t1 = [(list(p), b) for p, b in check.ragged.scheduled.requests], \
        check.ragged.scheduled.max_batch, check.ragged.eos_token_id, SamplingConfig()
    assert check_scheduled_law(target, None, requests, cap, t1, eos).passes(1e-9)
    planted = check_scheduled_law(target, None, requests, cap, t1, eos, target_factory=HolesSeen)
    assert not planted.passes(1e-9) and planted.tv > 1e-3, planted
