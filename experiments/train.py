"""Trains the model zoo (DESIGN section 1): tokenizer, then each model, on the stdlib corpus.

    python -m experiments.train experiment=zoo                          # tokenizer, target, draft
    python -m experiments.train experiment=zoo experiment.only=[draft]  # one model
    python -m experiments.train experiment=zoo experiment.train.steps=20 experiment.root=/tmp/zoo
    python -m experiments.train experiment=zoo experiment.export=experiments/zoo  # refresh the embedded zoo

Everything lands in `experiment.root` (a fixed folder, not Hydra's dated one, so that a second
call resumes): root/tokenizer, root/<name>/checkpoints/step_*, root/<name>/final. The tokenizer
is trained once and reused, so every model of the zoo shares it.
"""

from __future__ import annotations

from pathlib import Path

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from framework.zoo.checkpoints import export_checkpoint
from framework.zoo.corpus import build_corpus, stdlib_files
from framework.zoo.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from framework.zoo.train import train


def run(cfg: DictConfig) -> dict[str, Path]:
    exp = instantiate(cfg.experiment)
    if exp.num_threads is not None:
        torch.set_num_threads(exp.num_threads)
    root = Path(exp.root)
    corpus = build_corpus(stdlib_files(exp.corpus.root), heldout_fraction=exp.corpus.heldout_fraction)
    if (root / "tokenizer" / "tokenizer.json").exists():
        tokenizer = load_tokenizer(root / "tokenizer")
    else:
        tokenizer = save_tokenizer(train_tokenizer(corpus["train"]["text"], exp.vocab_size), root / "tokenizer")
        tokenizer = load_tokenizer(tokenizer)
    names = exp.only if exp.only is not None else list(exp.models)
    finals = {name: train(exp.models[name], tokenizer, corpus, root / name, exp.train) for name in names}
    if exp.export is not None:  # bf16 copies, e.g. into experiments/zoo (what the configs load)
        return {name: export_checkpoint(final, Path(exp.export) / name) for name, final in finals.items()}
    return finals


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    for name, path in run(cfg).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
