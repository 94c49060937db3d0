"""A few steps on a tiny slice lower the loss; checkpoints resume; saved models reload exactly;
long windows, distillation, non-finite steps and the time limit behave as TrainConfig says."""

from __future__ import annotations

import math

import pytest
import torch
import transformers

import framework.zoo.train as train_module
from framework.data.token_data import TokenData
from framework.zoo.models import llama_config
from framework.zoo.train import TrainConfig, latest_checkpoint, loss_on, train

TINY = TrainConfig(steps=20, batch_size=4, block_size=64, lr=3e-3, warmup=2, eval_every=10, eval_tokens=512,
                   save_every=10, bf16=True, device="cpu")


def tiny_model(vocab_size: int):
    return llama_config(vocab_size, num_layers=1, hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=128)


@pytest.fixture(scope="module")
def streams(small_streams):
    return small_streams


def history(out_dir) -> list[dict]:
    return torch.load(latest_checkpoint(out_dir) / "trainer_state.pt", weights_only=False)["history"]


def test_splits_partition_the_documents(small_corpus, small_tokenizer, streams):
    eos = small_tokenizer.eos_token_id
    docs = {name: int((data.ids == eos).sum()) for name, data in streams.items()}
    n_train = len(small_corpus["train"])
    assert docs["valid"] == len(range(0, n_train, 3)) and docs["train"] + docs["valid"] == n_train
    assert docs["heldout"] == len(small_corpus["heldout"])
    first_valid = small_tokenizer(small_corpus["train"]["text"][0], add_special_tokens=False)["input_ids"]
    assert streams["valid"].ids[1 : 1 + len(first_valid)].tolist() == first_valid  # document 0 went to valid
    assert streams["train"].ids.dtype == torch.int32 and bool(streams["train"].loss_mask.all())  # text: every token


def test_loss_decreases_and_model_reloads(streams, small_tokenizer, tmp_path):
    final = train(tiny_model, small_tokenizer, streams, tmp_path, TINY)
    losses = [h["loss"] for h in history(tmp_path)]
    assert len(losses) == 20 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3, losses
    evals = [h["heldout_loss"] for h in history(tmp_path) if "heldout_loss" in h]
    assert evals[-1] < evals[0] < 7.0  # ln(512) = 6.24 at chance

    # the final folder holds the best model by validation loss, which is the last one here
    state = torch.load(latest_checkpoint(tmp_path) / "trainer_state.pt", weights_only=False)
    assert state["best_step"] == 20
    ids = torch.tensor([small_tokenizer("import os\nprint(os.sep)\n")["input_ids"]])  # [1, T]
    with torch.no_grad():
        logits = [transformers.AutoModelForCausalLM.from_pretrained(p).eval()(ids).logits  # [1, T, V]
                  for p in (final, latest_checkpoint(tmp_path))]
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=0)
    assert (transformers.AutoTokenizer.from_pretrained(final)("x = 1")["input_ids"]
            == small_tokenizer("x = 1")["input_ids"])


def scripted_valid_losses(monkeypatch, losses: list[float]) -> None:
    """eval_loss returns the scripted validation losses in turn (held-out: a constant)."""
    script = iter(losses)
    calls = {"n": 0}

    def fake(model, blocks, batch_size, bf16):
        calls["n"] += 1
        return next(script) if calls["n"] % 2 == 1 else 5.0  # valid, then heldout, at every evaluation

    monkeypatch.setattr(train_module, "eval_loss", fake)


def test_final_is_the_best_validation_checkpoint(streams, small_tokenizer, tmp_path, monkeypatch):
    scripted_valid_losses(monkeypatch, [4.0, 3.0, 3.5, 3.2])  # evaluations at steps 5, 10, 15, 20
    cfg = TrainConfig(**{**TINY.__dict__, "eval_every": 5, "save_every": 5, "keep_checkpoints": 10})
    final = train(tiny_model, small_tokenizer, streams, tmp_path, cfg)
    state = torch.load(latest_checkpoint(tmp_path) / "trainer_state.pt", weights_only=False)
    assert state["best_step"] == 10 and state["best_valid"] == 3.0
    weights = lambda path: transformers.AutoModelForCausalLM.from_pretrained(path).state_dict()
    at_10, at_20 = (weights(tmp_path / "checkpoints" / "step_0000010"),
                    weights(tmp_path / "checkpoints" / "step_0000020"))
    got = weights(final)
    assert all(torch.equal(got[k], at_10[k]) for k in got) and not all(torch.equal(got[k], at_20[k]) for k in got)


def test_long_phase_keeps_tokens_per_step(streams, small_tokenizer, tmp_path, monkeypatch):
    cfg = TrainConfig(**{**TINY.__dict__, "steps": 8, "long_block_size": 128, "long_fraction": 0.25, "eval_every": 2})
    assert [cfg.window(s) for s in (0, 5, 6, 7)] == [(4, 64)] * 2 + [(2, 128)] * 2
    assert [cfg.selects(s) for s in range(1, 9)] == [False] * 6 + [True] * 2
    scripted_valid_losses(monkeypatch, [1.0, 1.0, 1.0, 3.0])  # short-window scores look better
    train(tiny_model, small_tokenizer, streams, tmp_path, cfg)
    assert [h["block"] for h in history(tmp_path)] == [64] * 6 + [128] * 2
    # the best model is chosen in the long phase only (step 8), never by a short-window score
    assert torch.load(latest_checkpoint(tmp_path) / "trainer_state.pt", weights_only=False)["best_step"] == 8


def test_random_windows_stay_inside_the_stream():
    stream = TokenData(torch.arange(100), torch.arange(100) % 2 == 0, "h")
    batch, mask = stream.batch(50, 16, torch.Generator().manual_seed(0))  # [50, 16]
    assert batch.shape == (50, 16) and int(batch.max()) <= 99
    assert torch.equal(batch - batch[:, :1], torch.arange(16).expand(50, 16))  # contiguous
    assert torch.equal(mask, batch % 2 == 0)  # each id keeps its own label flag
    with pytest.raises(ValueError, match="not one window"):
        stream.batch(1, 100, torch.Generator())


def test_distillation_loss_is_kl_to_the_teacher(small_tokenizer):
    torch.manual_seed(0)
    teacher = transformers.AutoModelForCausalLM.from_config(tiny_model(len(small_tokenizer))).eval()
    student = transformers.AutoModelForCausalLM.from_config(tiny_model(len(small_tokenizer))).eval()
    blocks = torch.randint(len(small_tokenizer), (2, 16))
    assert loss_on(teacher, blocks, bf16=False, teacher=teacher).abs().item() < 1e-6  # KL(p || p) = 0
    with torch.no_grad():
        p = teacher(blocks).logits.log_softmax(-1)
        q = student(blocks).logits.log_softmax(-1)
    expected = (p.exp() * (p - q)).sum(-1).mean()
    torch.testing.assert_close(loss_on(student, blocks, bf16=False, teacher=teacher), expected, rtol=1e-5, atol=1e-6)


def test_distilled_student_approaches_the_teacher(streams, small_tokenizer, tmp_path):
    torch.manual_seed(1)
    teacher = transformers.AutoModelForCausalLM.from_config(tiny_model(len(small_tokenizer))).eval()
    train(tiny_model, small_tokenizer, streams, tmp_path, TINY, teacher=teacher)
    kl = [h["loss"] for h in history(tmp_path)]
    assert sum(kl[-5:]) / 5 < 0.5 * sum(kl[:5]) / 5, kl


class PoisonedOnce(torch.nn.Module):
    """Wraps a model; its loss is NaN at the chosen forward calls (as a bf16 overflow would make it)."""

    def __init__(self, model, bad_calls: set[int]):
        super().__init__()
        self.model, self.bad_calls, self.calls = model, bad_calls, 0

    def forward(self, **kwargs):
        out = self.model(**kwargs)
        self.calls += 1
        if self.calls in self.bad_calls and out.loss is not None:
            out.loss = out.loss * float("nan")
        return out


def test_non_finite_steps_are_skipped_not_applied(streams, small_tokenizer, tmp_path, monkeypatch):
    cfg = TrainConfig(**{**TINY.__dict__, "steps": 6, "eval_every": 100, "save_every": 100})
    real = transformers.AutoModelForCausalLM.from_config
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config",
                        lambda *a, **k: PoisonedOnce(real(*a, **k), {3}))
    monkeypatch.setattr(PoisonedOnce, "save_pretrained", lambda self, path: self.model.save_pretrained(path),
                        raising=False)
    train(tiny_model, small_tokenizer, streams, tmp_path, cfg)
    state = torch.load(latest_checkpoint(tmp_path) / "trainer_state.pt", weights_only=False)
    assert state["skipped"] == 1 and math.isnan(state["history"][2]["loss"])
    assert all(math.isfinite(h["loss"]) for i, h in enumerate(state["history"]) if i != 2)  # weights stayed finite

    every = TrainConfig(**{**cfg.__dict__, "max_skipped": 2})
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config",
                        lambda *a, **k: PoisonedOnce(real(*a, **k), set(range(1, 10))))
    with pytest.raises(FloatingPointError, match="3 steps had a non-finite"):
        train(tiny_model, small_tokenizer, streams, tmp_path / "again", every)


def test_time_limit_stops_with_a_checkpoint_then_resumes(streams, small_tokenizer, tmp_path):
    stopped = TrainConfig(**{**TINY.__dict__, "time_limit_s": 0.0})
    assert train(tiny_model, small_tokenizer, streams, tmp_path, stopped) is None
    assert latest_checkpoint(tmp_path).name == "step_0000000"
    assert train(tiny_model, small_tokenizer, streams, tmp_path, TINY) == tmp_path / "final"
    assert [h["step"] for h in history(tmp_path)] == list(range(1, 21))


def test_save_then_from_pretrained_gives_same_logits(small_tokenizer, tmp_path):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_model(len(small_tokenizer))).eval()
    model.save_pretrained(tmp_path)
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.tensor([small_tokenizer("for i in range(3):\n    pass\n")["input_ids"]])  # [1, T]
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_resume_continues_from_latest_checkpoint(streams, small_tokenizer, tmp_path):
    short = TrainConfig(**{**TINY.__dict__, "steps": 10})
    train(tiny_model, small_tokenizer, streams, tmp_path, short)
    assert latest_checkpoint(tmp_path).name == "step_0000010"
    train(tiny_model, small_tokenizer, streams, tmp_path, TINY)  # 10 more, not 20
    assert [h["step"] for h in history(tmp_path)] == list(range(1, 21))
    assert latest_checkpoint(tmp_path).name == "step_0000020"
