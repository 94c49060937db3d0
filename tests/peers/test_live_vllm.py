"""The live vLLM engine (`python -m pytest -m vllm`; needs `python -m experiments.peers.setup vllm`): every vLLM row's
greedy text equals our plain decoding on the zoo target at float32, and our prompt lookup inside vLLM keeps the
target's law (a G-test of vLLM's sampled first two tokens against the teacher-forced law)."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from engine.loop import generate
from experiments.peers.law import MIN_PROB, engine_law_check
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from framework.lm.text import encode_prompt, tokenizer_of
from framework.zoo.checkpoints import load_causal_lm, resolve_checkpoint
from harness.real import teacher_forced_law
from measurement.peers.engine import PeerEngine, PeerMissing, peer_python
from measurement.peers.rows import ROWS, proposer_env, speculative_config
from tests.peers.record_session import PROMPTS
from tests.test_compare import CONF

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module", autouse=True)
def environment():
    try:
        peer_python("vllm")
    except PeerMissing as missing:
        pytest.skip(str(missing))


def config(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="peer_law", overrides=list(overrides))


@pytest.mark.parametrize("row", ROWS)
def test_every_vllm_row_decodes_our_plain_greedy_text(row):
    settings = config().experiment.vllm
    target = HFTarget(load_causal_lm("target"))
    ours = [generate(target, None, torch.tensor([p]), 32, SamplingConfig(temperature=0)).tokens[0].tolist()
            for p in PROMPTS]
    with PeerEngine("vllm", resolve_checkpoint("target"), 256, speculative_config(settings.rows[row]),
                    worker_env=proposer_env(settings, row)) as engine:
        theirs = engine.generate(PROMPTS, 32, {"temperature": 0.0})
    assert theirs.tokens == ours


def test_our_prompt_lookup_inside_vllm_keeps_the_targets_law():
    result = engine_law_check(config(), "vllm_speculum_pld", samples=3000, depth=3)
    assert result["drafts"] > 0, "the check prompt must make prompt lookup draft"
    assert result["g_test_p"] > 1e-3, result


def test_the_check_through_vllm_has_teeth_a_law_at_the_wrong_temperature_fails():
    """vLLM's T = 1 samples against the law at T = 0.8: the same check must reject it."""
    cfg = config()
    model = load_causal_lm("target")
    prompt = encode_prompt(cfg.peer_law.prompt, tokenizer_of(model))
    wrong = {d: teacher_forced_law(model, prompt, d, SamplingConfig(temperature=0.8), min_prob=MIN_PROB)
             for d in (1, 2)}
    result = engine_law_check(cfg, "vllm_plain", samples=3000, depth=2, laws=wrong, prompt=prompt[0].tolist())
    assert result["g_test_p"] < 1e-3, result
