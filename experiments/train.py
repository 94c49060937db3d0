"""Trains the model zoo (docs/design.md section 1): tokenizer, then each model, on the stdlib corpus.

    python -m experiments.train training=zoo                          # tokenizer, target, drafts
    python -m experiments.train training=zoo training.only=[draft]  # one model (its teacher must exist)
    python -m experiments.train training=zoo training.train.steps=20 training.root=/tmp/zoo
    python -m experiments.train training=zoo training.export=experiments/zoo  # refresh the embedded zoo
    python -m experiments.train training=zoo_medusa                   # Medusa heads (recipes/medusa.py)

Each option of conf/training names its `job` (the function that trains it): the zoo's is here, the drafters'
are in recipes/.
The training group was once part of conf/experiment: `experiment=zoo_mtp` is refused, naming `training=zoo_mtp`.

Everything lands in `training.root` (a fixed folder, not Hydra's dated one, so that a second
call resumes): root/tokenizer, root/data/stdlib-*.pt (the token data, framework/data), root/<name>/checkpoints/step_*,
root/<name>/final. The tokenizer and the streams are made once and reused, so every model of the
zoo shares them, and a machine without the corpus (another Python, no `datasets`) can train from
a copied root. A model with `tokenizer_vocab_size` and/or `tokenizer_sample` gets its own tokenizer instead
(root/tokenizer_<size>[_sample<fraction>], trained the same way on the same split or on that seeded fraction of its
files, so that its merges and ids differ; its token data, the whole split, lands in root/data too), e.g. a draft for
cross-tokenizer speculation. A model with a `teacher` is distilled from the teacher's raw laws (root/<teacher>/best);
a teacher and an own tokenizer together are refused (the laws would be over different vocabularies).
With `calibrate`, each final model then gets one temperature fitted on the validation documents
and folded into its output head (framework/zoo/calibrate.py): cross-entropy for a model of its
own, KL to the calibrated teacher for a distilled one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
import torch
import transformers
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.zoo.calibrate import calibrate_checkpoint
from framework.zoo.checkpoints import export_checkpoint
from framework.zoo.streams import tokenizer_and_streams
from framework.zoo.train import train


def command_line_train() -> set[str]:
    """The training.train keys this run's command line sets (they win over a model's own train settings)."""
    if not HydraConfig.initialized():
        return set()
    prefix = "training.train."
    return {o.split("=", 1)[0][len(prefix):] for o in HydraConfig.get().overrides.task if o.startswith(prefix)}


def own_settings(name: str, spec, given: set[str]) -> dict:
    """A model's own train settings, less those the command line gives for every model (said when it does)."""
    own = dict(spec.get("train") or {})
    for key in sorted(given & set(own)):
        print(f"{name}: training.train.{key} from the command line replaces its own train.{key}={own.pop(key)}")
    return own


def run(cfg: DictConfig) -> dict[str, Path | None]:
    exp = instantiate(cfg.training, job=None)
    if exp.num_threads is not None:
        torch.set_num_threads(exp.num_threads)
    names = exp.only if exp.only is not None else list(exp.models)
    for name in names:  # refused before anything is trained
        spec = exp.models[name]
        own = spec.get("tokenizer_vocab_size"), spec.get("tokenizer_sample")
        if own != (None, None) and spec.get("teacher"):
            raise ValueError(f"model {name!r} has its own tokenizer (tokenizer_vocab_size={own[0]}, tokenizer_sample="
                             f"{own[1]}) and a teacher ({spec.teacher!r}): distillation compares laws token by token, "
                             "so it needs the teacher's vocabulary; drop one of the two")
    root = Path(exp.root)
    root.mkdir(parents=True, exist_ok=True)
    shared = tokenizer_and_streams(exp, root)  # made even when no model uses it: `only=[]` prepares a root
    finals = {}
    for name in names:
        spec = exp.models[name]
        own = spec.get("tokenizer_vocab_size"), spec.get("tokenizer_sample")
        tokenizer, streams = shared if own == (None, None) else tokenizer_and_streams(exp, root, *own)
        settings = instantiate(OmegaConf.merge(cfg.training.train, own_settings(name, spec, command_line_train())))
        teacher = root / spec["teacher"] if spec.get("teacher") else None
        raw_teacher = None  # distillation reads the teacher's laws before its calibration
        if teacher is not None:
            raw_teacher = transformers.AutoModelForCausalLM.from_pretrained(teacher / "best", dtype=torch.float32)
        finals[name] = final = train(spec["config"], tokenizer, streams, root / name, settings, raw_teacher)
        if final is not None and exp.calibrate:  # fitted on the validation documents, folded into lm_head
            calibrate_checkpoint(final, streams["valid"], settings.long_block_size or settings.block_size,
                                 teacher_folder=None if teacher is None else teacher / "final")
    if exp.export is not None:  # bf16 copies, e.g. into experiments/zoo (what the configs load)
        return {name: final and export_checkpoint(final, Path(exp.export) / name) for name, final in finals.items()}
    return finals


def train_zoo(cfg: DictConfig) -> None:
    for name, path in run(cfg).items():
        print(f"{name}: {path or 'stopped at the time limit (call again to resume)'}")


TRAININGS = Path(__file__).resolve().parents[1] / "conf" / "training"


def refuse_old_spelling(args: list[str]) -> None:
    """`experiment=zoo_mtp` (and `experiment.KEY=...`) from before the training group: a clear error naming the new
    spelling, instead of Hydra's "Could not find 'experiment/zoo_mtp'" (experiments.train reads no experiment)."""
    for arg in args:
        key, eq, value = arg.lstrip("+~").partition("=")
        if key == "experiment" and eq and (TRAININGS / f"{value}.yaml").is_file():
            raise SystemExit(f"experiments.train: `{arg}` is now `training={value}` (conf/training); "
                             "its settings too: training.KEY=... instead of experiment.KEY=...")
        if key.startswith("experiment.") and eq:
            raise SystemExit(f"experiments.train: `{arg}` is now `training.{arg.partition('experiment.')[2]}` "
                             "(the training settings are the `training` group, conf/training)")


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    if cfg.get("training") is None:
        options = ", ".join(sorted(p.stem for p in TRAININGS.glob("*.yaml")))
        raise SystemExit(f"experiments.train needs training=<name>, one of conf/training: {options}")
    instantiate(cfg.training.job)(cfg)  # the training's own trainer: train_zoo here, recipes.medusa.run, ...


if __name__ == "__main__":
    refuse_old_spelling(sys.argv[1:])
    main()
