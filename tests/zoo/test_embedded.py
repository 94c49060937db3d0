"""The committed zoo (experiments/zoo/target and draft; bf16 weights) loads with plain transformers and decodes."""

from pathlib import Path

import torch
import transformers

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from proposers import DraftModelProposer

ZOO = Path(__file__).resolve().parents[2] / "experiments" / "zoo"


def test_zoo_loads_and_decodes():
    tokenizer = transformers.AutoTokenizer.from_pretrained(ZOO / "target")
    target = transformers.AutoModelForCausalLM.from_pretrained(ZOO / "target", dtype=torch.float32).eval()
    draft = transformers.AutoModelForCausalLM.from_pretrained(ZOO / "draft", dtype=torch.float32).eval()
    prompt = torch.tensor([tokenizer("def add(a, b):\n    return")["input_ids"]])
    plain = generate(HFTarget(target), None, prompt, 16, SamplingConfig(temperature=0))
    spec = generate(HFTarget(target), DraftModelProposer(draft), prompt, 16, SamplingConfig(temperature=0))
    assert torch.equal(plain.tokens, spec.tokens)
    assert spec.stats.summary()["tokens_per_forward"] > 1.0  # a trained pair agrees, unlike random weights
    assert tokenizer.decode(plain.tokens[0]).strip()
