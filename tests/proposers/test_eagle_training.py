"""EAGLE training: the unrolled attention pattern, a short resumable run that learns, the accuracy table."""

import pytest
import torch

from framework.data.token_data import TokenData
from framework.lm.models import tiny_random_model
from proposers.eagle.head import EagleHead
from proposers.eagle.training import EagleTrainConfig, draft_vocabulary, train_head, unroll_mask


def test_unrolled_step_sees_the_context_and_its_own_chain():
    mask = unroll_mask(4, 2).int()
    assert mask[2].tolist() == [1, 1, 1, 0] + [0, 0, 1, 0] + [0, 0, 1, 0]  # keys <= t at step 0, then t itself
    assert mask.shape == (4, 12)


def test_short_run_learns_and_resumes(tmp_path):
    target = tiny_random_model("llama", vocab_size=32, hidden_size=32, num_layers=2, max_positions=64, seed=0,
                               init_std=0.3)
    stream = torch.arange(4000) % 7  # periodic: the head can learn it from the tokens alone
    data = TokenData(stream, torch.ones_like(stream, dtype=torch.bool), "test")
    streams = {"train": data, "valid": data, "heldout": data}
    cfg = EagleTrainConfig(steps=40, batch_size=4, block_size=32, lr=1e-2, warmup=2, unroll=2, feature_weight=0.0,
                           token_weight=1.0, noise=0.0, eval_every=20, eval_tokens=256, eval_depth=3, save_every=10,
                           device="cpu", time_limit_s=0.0)
    vocabulary, covered = draft_vocabulary(stream, 24, 32)  # EAGLE-3 over its own 24 tokens: all 7 the stream uses
    assert covered == 1.0 and vocabulary.tolist() == sorted(vocabulary.tolist())

    def fresh():
        head = EagleHead.for_target(target, "eagle3", (1, 2), num_heads=2, num_kv_heads=1, intermediate_size=32,
                                    draft_vocab_size=24)
        return head.set_vocabulary(vocabulary)

    head = fresh()
    # stopped after one step: checkpoint written
    assert train_head(target, {"kl": head}, streams, tmp_path, cfg) is None
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["step"] == 1
    head = train_head(target, {"kl": fresh()}, streams, tmp_path,
                      EagleTrainConfig(**{**cfg.__dict__, "time_limit_s": None}))["kl"]
    log = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["log"]
    assert [row["step"] for row in log] == list(range(1, 41))
    assert log[-1]["parts"][0] < log[0]["parts"][0] / 2.5 and log[-1]["parts"][1] < log[0]["parts"][1] / 2.5
    # its acceptance table is checked against an independent computation in tests/training/test_accuracy_tables.py


def test_draft_vocabulary_is_the_most_frequent_tokens_in_order():
    tokens = torch.tensor([5, 5, 5, 2, 2, 9, 9, 9, 9, 1])
    vocabulary, covered = draft_vocabulary(tokens, 3, 12)
    assert vocabulary.tolist() == [2, 5, 9] and covered == pytest.approx(0.9)
