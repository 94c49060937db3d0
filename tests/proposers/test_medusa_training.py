"""Medusa training: the head/label alignment, a short resumable run, the accuracy tables."""

from types import SimpleNamespace

import pytest
import torch

from framework.data.token_data import TokenData
from framework.lm.models import tiny_random_model
from framework.training.losses import KL, CrossEntropy
from proposers.medusa.training import MedusaTrainConfig, accuracy, head_losses, train_heads

V, T, K = 11, 12, 3


class OracleHeads:
    """Heads whose logits are given: [B, T, K, V] (a token table [B, T, K] becomes sharp one-hot logits)."""

    def __init__(self, logits):
        self.logits = 30.0 * torch.nn.functional.one_hot(logits, V).float() if logits.dim() == 3 else logits
        self.config = SimpleNamespace(num_heads=self.logits.shape[2])

    def __call__(self, hidden):
        return self.logits


def test_head_k_at_t_is_scored_against_token_t_plus_k_plus_2():
    blocks = torch.randint(V, (2, T), generator=torch.Generator().manual_seed(0))
    table = torch.zeros(2, T, K, dtype=torch.long)
    for k in range(K):
        table[:, : T - k - 2, k] = blocks[:, k + 2 :]
    hidden = torch.zeros(2, T, 4)
    mask = torch.ones_like(blocks, dtype=torch.bool)
    sums, counts = head_losses(OracleHeads(table), hidden, None, blocks, mask, CrossEntropy())
    assert (sums / counts).max() < 1e-6 and counts.tolist() == [2 * (T - k - 2) for k in range(K)]
    shifted = table.roll(1, dims=1)  # one position off
    sums, counts = head_losses(OracleHeads(shifted), hidden, None, blocks, mask, CrossEntropy())
    assert (sums / counts).min() > 1.0


def test_self_distillation_reads_the_target_law_one_position_later():
    blocks = torch.randint(V, (2, T), generator=torch.Generator().manual_seed(1))
    target_logits = 3 * torch.randn(2, T, V, generator=torch.Generator().manual_seed(2))
    oracle = torch.zeros(2, T, K, V)
    for k in range(K):
        oracle[:, : T - k - 2, k] = target_logits[:, k + 1 : T - 1]  # head k at t copies the target's law at t+k+1
    hidden = torch.zeros(2, T, 4)
    mask = torch.ones_like(blocks, dtype=torch.bool)
    sums, counts = head_losses(OracleHeads(oracle), hidden, target_logits, blocks, mask, KL())
    assert (sums / counts).max() < 1e-5
    sums, counts = head_losses(OracleHeads(oracle.roll(1, dims=1)), hidden, target_logits, blocks, mask, KL())
    assert (sums / counts).min() > 1.0


def test_only_labelled_tokens_are_scored():
    blocks = torch.randint(V, (2, T), generator=torch.Generator().manual_seed(3))
    table = torch.zeros(2, T, K, dtype=torch.long)  # right only where the label is token 0 ...
    mask = blocks == 0
    sums, counts = head_losses(OracleHeads(table), torch.zeros(2, T, 4), None, blocks, mask, CrossEntropy())
    assert counts.tolist() == [int(mask[:, k + 2 :].sum()) for k in range(K)] and float(sums.max()) < 1e-6


def test_short_run_learns_and_resumes(tmp_path):
    target = tiny_random_model("llama", vocab_size=32, hidden_size=32, num_layers=1, max_positions=64, seed=0,
                               init_std=0.3)
    stream = torch.arange(4000) % 7  # periodic: every head can learn it
    data = TokenData(stream, torch.ones_like(stream, dtype=torch.bool), "test")
    streams = {"train": data, "valid": data, "heldout": data}
    cfg = MedusaTrainConfig(num_heads=2, steps=40, batch_size=4, block_size=32, lr=1e-2, warmup=2, eval_every=20,
                            eval_tokens=256, save_every=10, device="cpu", time_limit_s=0.0)
    assert train_heads(target, streams, tmp_path, cfg) is None  # stopped after one step: checkpoint written
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["step"] == 1
    heads = train_heads(target, streams, tmp_path, MedusaTrainConfig(**{**cfg.__dict__, "time_limit_s": None}))
    assert set(heads) == {"ce", "kl"}
    log = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["log"]
    assert len(log) == 40 and [row["step"] for row in log] == list(range(1, 41))
    acc = accuracy(heads["ce"], target, stream[:256].view(8, 32), ranks=3, bf16=False)
    assert len(acc["accept"]) == 2 and len(acc["accept"][0]) == 3
    assert min(acc["top1_corpus"]) > 0.9  # the period is learnt by both heads
    assert log[-1]["parts"][0] < log[0]["parts"][0] / 4  # ce, head 0


def test_no_loss_is_refused():
    with pytest.raises(ValueError, match="losses is empty"):
        MedusaTrainConfig(losses={})
