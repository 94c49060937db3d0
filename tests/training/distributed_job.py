"""One EAGLE-3 training run on the tiny chat target, as a script: `python distributed_job.py TARGET CHATS OUT [STEPS]`
in one process, or `torchrun --nproc-per-node 2 distributed_job.py ...` in two (tests/training/test_distributed.py)."""

import sys

import torch

from framework.data.sources import Messages, cached_splits
from framework.lm.text import tokenizer_of
from framework.training.loop import main_process_first
from framework.training.losses import KL, LogAcceptance
from framework.zoo.checkpoints import load_causal_lm
from proposers.eagle.head import EagleHead
from proposers.eagle.training import EagleTrainConfig, train_head


def main(target_path: str, chats: str, out: str, steps: int = 20, time_limit_s: float | None = None) -> None:
    torch.set_num_threads(1)
    target = load_causal_lm(target_path)
    with main_process_first("cpu"):  # the others then read the token data it made
        data = cached_splits(Messages(path=chats), tokenizer_of(target), out, heldout_fraction=0.2, valid_every=4)
    cfg = EagleTrainConfig(steps=steps, batch_size=4, block_size=48, lr=3e-3, warmup=2, unroll=2, feature_weight=0.0,
                           token_weight=1.0, noise=0.1, eval_every=10, eval_tokens=96, eval_depth=2, save_every=5,
                           device="cpu", time_limit_s=time_limit_s, losses={"kl": KL(), "lk": LogAcceptance()})
    heads = {}
    for name in cfg.losses:
        torch.manual_seed(0)
        heads[name] = EagleHead.for_target(target, "eagle3", None, num_heads=2, num_kv_heads=1, intermediate_size=64)
    train_head(target, heads, data, out, cfg)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 20,
         float(sys.argv[5]) if len(sys.argv) > 5 else None)
