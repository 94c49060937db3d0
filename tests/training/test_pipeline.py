"""Every drafter trains on a local chat target's own tokens through the one pipeline: a few steps lower the loss."""

import pytest
import torch

from framework.data.sources import ShareGPT, cached_splits
from framework.lm.text import tokenizer_of
from framework.training.losses import KL, CrossEntropy, LogAcceptance
from framework.zoo.checkpoints import load_causal_lm
from proposers.draft_training import DraftTrainConfig, train_drafts
from proposers.eagle.head import EagleHead
from proposers.eagle.training import EagleTrainConfig, train_head
from proposers.medusa.training import MedusaTrainConfig, train_heads
from tests.training.test_distributed import curve

LOOP = dict(steps=16, batch_size=4, block_size=48, lr=3e-3, warmup=2, eval_every=100, eval_tokens=96, save_every=8,
            device="cpu")


@pytest.fixture(scope="module")
def setting(chat_target, chat_files, tmp_path_factory):
    target = load_causal_lm(chat_target)
    root = tmp_path_factory.mktemp("pipeline")
    return target, cached_splits(ShareGPT(path=str(chat_files["sharegpt"])), tokenizer_of(target), root, 0.2, 4)


def fell(out, part: int = 0, factor: float = 0.9) -> bool:
    parts, _ = curve(out)
    first, last = sum(p[part] for p in parts[:3]) / 3, sum(p[part] for p in parts[-3:]) / 3
    return last < factor * first


@pytest.mark.slow  # 7-9 s; EAGLE-3 training stays in the default tier through test_experiments' chat-target heads
def test_eagle3_heads_side_by_side(setting, tmp_path):
    target, data = setting
    cfg = EagleTrainConfig(**LOOP, unroll=2, feature_weight=0.0, token_weight=1.0, noise=0.0, eval_depth=2,
                           losses={"kl": KL(), "lk": LogAcceptance()})
    heads = {}
    for name in cfg.losses:
        torch.manual_seed(0)
        heads[name] = EagleHead.for_target(target, "eagle3", None, num_heads=2, num_kv_heads=1, intermediate_size=64)
    trained = train_head(target, heads, data, tmp_path, cfg)
    assert set(trained) == {"kl", "lk"}
    assert fell(tmp_path, 0) and fell(tmp_path, 2)  # depth 0 of each head


def test_medusa_heads(setting, tmp_path):
    target, data = setting
    cfg = MedusaTrainConfig(**{**LOOP, "lr": 3e-2, "steps": 10}, num_heads=1, losses={"ce": CrossEntropy(), "kl": KL()})
    trained = train_heads(target, data, tmp_path, cfg)
    assert set(trained) == {"ce", "kl"} and fell(tmp_path, 0) and fell(tmp_path, 1)  # head 0 of each set


def test_distilled_draft(setting, tmp_path):
    target, data = setting
    draft = load_causal_lm(target.config.name_or_path)
    with torch.no_grad():
        for p in draft.parameters():  # a draft that starts off the target's law
            p.mul_(0.5)
    trained = train_drafts(target, draft, data, tmp_path, DraftTrainConfig(**LOOP, losses={"kl": KL()}))
    assert set(trained) == {"kl"} and fell(tmp_path, 0)


def test_a_draft_on_another_vocabulary_is_refused(setting, tmp_path):
    from framework.lm.models import tiny_random_model

    target, data = setting
    with pytest.raises(ValueError, match="vocabulary has 64 rows, the target's 40000"):
        train_drafts(target, tiny_random_model("llama", vocab_size=64), data, tmp_path, DraftTrainConfig(**LOOP))
