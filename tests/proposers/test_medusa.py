"""MedusaProposer: lossless through the shared verifier (greedy identity, exact law), heads I/O, bad input."""

import pytest
import torch

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.exact import compare
from harness.real import exact_loop_law, greedy_identity, teacher_forced_law
from proposers import MedusaHeads, MedusaProposer
from proposers.medusa.heads import MedusaConfig
from verifiers import typical_verifier

ARCHS = ["llama", "qwen2", "mistral", "gpt2"]
CHOICES = [(0,), (1,), (0, 0), (1, 0), (0, 1), (0, 0, 0)]


def random_heads(model, num_heads=3, seed=0, scale=0.5):
    """Heads sized for `model` with random residual blocks and output layers."""
    torch.manual_seed(seed)
    heads = MedusaHeads.for_target(model, num_heads)
    for p in heads.parameters():
        p.data.add_(scale * torch.randn_like(p))
    return heads.to(next(model.parameters()).dtype)


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_identity(arch):
    target = tiny_random_model(arch, seed=3, dtype="float64", init_std=0.3)
    heads = random_heads(target)
    for kind in ("point", "iid", "wor"):
        report = greedy_identity(target, lambda: MedusaProposer(heads, CHOICES, kind=kind),
                                 torch.tensor([[4, 9, 2]]), 24)
        assert report.equal, (arch, kind, report.first_difference)


TOY = dict(vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, dtype="float64", init_std=0.3)
TARGET = tiny_random_model("llama", seed=0, **TOY)
PROMPT = torch.tensor([[1, 2, 0]])
SMALL = [(0,), (1,), (0, 0)]


def test_typical_acceptance_fails_on_medusa_trees():
    heads = random_heads(TARGET, num_heads=2, scale=1.0)
    spec = exact_loop_law(TARGET, lambda: MedusaProposer(heads, SMALL), PROMPT, 3, SamplingConfig(),
                          verifier=typical_verifier())
    assert compare(spec, teacher_forced_law(TARGET, PROMPT, 3, SamplingConfig())).tv > 1e-3


def test_heads_round_trip(tmp_path):
    target = tiny_random_model("llama", seed=0)
    heads = random_heads(target)
    heads.save(tmp_path, dtype=torch.float32)
    loaded = MedusaHeads.load(tmp_path)
    h = torch.randn(2, 5, target.config.hidden_size)
    assert torch.equal(loaded(h), heads(h)) and loaded(h).shape == (2, 5, 3, target.config.vocab_size)


def test_fresh_heads_start_as_the_lm_head():
    target = tiny_random_model("llama", seed=0)
    h = torch.randn(4, target.config.hidden_size)
    logits = MedusaHeads.for_target(target, 2)(h)
    assert torch.allclose(logits, target.lm_head(h)[:, None].expand(-1, 2, -1), atol=1e-6)


def test_bad_input(tmp_path):
    target = tiny_random_model("llama", seed=0)
    other = MedusaHeads(MedusaConfig(hidden_size=48, vocab_size=100, num_heads=2))
    with pytest.raises(ValueError, match="hidden size 48 and vocabulary 100.*hidden size 32 and vocabulary 64"):
        generate(HFTarget(target), MedusaProposer(other), torch.tensor([[1, 2]]), 4)
    with pytest.raises(FileNotFoundError, match="training=zoo_medusa"):
        MedusaHeads.load(tmp_path / "missing")
    with pytest.raises(ValueError, match="only 2 heads"):
        MedusaProposer(other, [(0,), (0, 0), (0, 0, 0)])
    with pytest.raises(ValueError, match="kind"):
        MedusaProposer(other, kind="typical")
    with pytest.raises(ValueError, match="choices is empty"):
        MedusaProposer(other, [])
    toy = tiny_random_model("llama", vocab_size=3, hidden_size=16, num_heads=2, num_kv_heads=1)
    with pytest.raises(ValueError, match="rank 3 but the vocabulary has 3 tokens"):
        generate(HFTarget(toy), MedusaProposer(random_heads(toy, 2), [(0,), (3,)]), torch.tensor([[1, 2]]), 4)


def test_heads_read_the_hidden_state_that_produced_the_root():
    """At every step the heads see the target's last hidden state at the position before the root,
    as a plain forward of the whole sequence computes it."""
    target = tiny_random_model("llama", seed=5, dtype="float64", init_std=0.3)
    seen: list[tuple[torch.Tensor, int]] = []  # (hidden the heads read, tokens emitted before this step)

    class Recording(MedusaProposer):
        emitted = 1  # the prefill emits the first root

        def propose(self, state):
            seen.append((state.target_hidden[0, -1].clone(), self.emitted))
            return super().propose(state)

        def commit(self, result):
            self.emitted += int(result.num_accepted[0]) + 1

    prompt = torch.tensor([[4, 9, 2, 5]])
    out = generate(HFTarget(target), Recording(random_heads(target), CHOICES), prompt, 20,
                   SamplingConfig(temperature=0))
    full = torch.cat([prompt, out.tokens], dim=1)
    hidden = target(full, output_hidden_states=True).hidden_states[-1][0]  # [L, H]
    assert len(seen) > 3 and len({n for _, n in seen}) == len(seen)
    for h, emitted in seen:
        assert torch.allclose(h, hidden[prompt.shape[1] + emitted - 2], atol=1e-10)
