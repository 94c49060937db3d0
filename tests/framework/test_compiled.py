"""The opt-in compiled forward: a failure falls back to eager with one warning, results unchanged."""

import warnings

import pytest
import torch

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from proposers import DraftModelProposer

PROMPT = torch.tensor([[1, 2, 3, 4]])


def broken_compile(model, **options):
    def run(**kwargs):
        model(**kwargs)  # writes its KV slots first, then fails: the rollback must undo them
        raise RuntimeError("planted backend failure")
    return run


def test_a_failing_compile_warns_once_and_changes_nothing(monkeypatch):
    model, draft = tiny_random_model(seed=0, init_std=0.3), tiny_random_model(seed=1, init_std=0.3)
    eager = generate(HFTarget(model), DraftModelProposer(draft, depth=3), PROMPT, 12, SamplingConfig(), seed=3)
    monkeypatch.setattr(torch, "compile", broken_compile)
    target = HFTarget(model, compile=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = generate(target, DraftModelProposer(draft, depth=3), PROMPT, 12, SamplingConfig(), seed=3)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "planted backend failure" in messages[0], messages
    assert target.lm.call.failure.startswith("RuntimeError")
    assert torch.equal(out.tokens, eager.tokens)


@pytest.mark.slow
def test_the_compiled_forward_decodes_like_eager():
    model = tiny_random_model(seed=0, init_std=0.3)
    eager = generate(HFTarget(model), None, PROMPT, 8, SamplingConfig(temperature=0.0))
    target = HFTarget(tiny_random_model(seed=0, init_std=0.3), compile=True)
    out = generate(target, None, PROMPT, 8, SamplingConfig(temperature=0.0))
    assert target.lm.call.failure is None and torch.equal(out.tokens, eager.tokens)
