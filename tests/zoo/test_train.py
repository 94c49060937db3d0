"""A few steps on a tiny slice lower the loss; checkpoints resume; saved models reload exactly."""

from __future__ import annotations

import torch
import transformers

from framework.zoo.models import llama_config
from framework.zoo.train import TrainConfig, latest_checkpoint, train

TINY = TrainConfig(steps=20, batch_size=4, block_size=64, lr=3e-3, warmup=2, eval_every=10, eval_blocks=8,
                   save_every=10, bf16=True)


def tiny_model(vocab_size: int):
    return llama_config(vocab_size, num_layers=1, hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=128)


def history(out_dir) -> list[dict]:
    return torch.load(latest_checkpoint(out_dir) / "trainer_state.pt", weights_only=False)["history"]


def test_loss_decreases_and_model_reloads(small_corpus, small_tokenizer, tmp_path):
    final = train(tiny_model, small_tokenizer, small_corpus, tmp_path, TINY)
    losses = [h["loss"] for h in history(tmp_path)]
    assert len(losses) == 20 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3, losses
    evals = [h["heldout_loss"] for h in history(tmp_path) if "heldout_loss" in h]
    assert evals[-1] < evals[0] < 7.0  # ln(512) = 6.24 at chance

    # the final folder holds the weights of the last checkpoint, and both reload to the same logits
    ids = torch.tensor([small_tokenizer("import os\nprint(os.sep)\n")["input_ids"]])  # [1, T]
    with torch.no_grad():
        logits = [transformers.AutoModelForCausalLM.from_pretrained(p).eval()(ids).logits  # [1, T, V]
                  for p in (final, latest_checkpoint(tmp_path))]
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=0)
    assert transformers.AutoTokenizer.from_pretrained(final)("x = 1")["input_ids"] == small_tokenizer("x = 1")["input_ids"]


def test_save_then_from_pretrained_gives_same_logits(small_tokenizer, tmp_path):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_model(len(small_tokenizer))).eval()
    model.save_pretrained(tmp_path)
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.tensor([small_tokenizer("for i in range(3):\n    pass\n")["input_ids"]])  # [1, T]
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_resume_continues_from_latest_checkpoint(small_corpus, small_tokenizer, tmp_path):
    short = TrainConfig(**{**TINY.__dict__, "steps": 10})
    train(tiny_model, small_tokenizer, small_corpus, tmp_path, short)
    assert latest_checkpoint(tmp_path).name == "step_0000010"
    train(tiny_model, small_tokenizer, small_corpus, tmp_path, TINY)  # 10 more, not 20
    assert [h["step"] for h in history(tmp_path)] == list(range(1, 21))
    assert latest_checkpoint(tmp_path).name == "step_0000020"
