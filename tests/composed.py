"""The project's Hydra configs composed for tests, the way its entry points compose them (one place for the
config folder and Hydra's version base)."""

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

CONF = Path(__file__).resolve().parents[1] / "conf"


def composed(config_name: str, *overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides))

# The drafters that draw each of their `depth` levels from a model's law (the draft model and its kin): tests cut
# their chains to the exact law's depth, since draws past it are never read by the law, they only multiply worlds.
LEVEL_DRAFTERS = ("proposers.DraftModelProposer", "proposers.CrossVocabularyProposer", "proposers.StringMatchProposer",
                  "proposers.self_spec.EarlyExitProposer", "proposers.self_spec.LayerSkipProposer")

# One method of each way of reading the target (a drafted tree, the target's features, its own layers, its MTP
# modules, side rows in the verifying forward, a text match): the default tier's choice where a grid over every
# method repeats one mechanism many times (every method runs there under -m slow).
REPRESENTATIVES = ("draft_tree", "eagle3", "layer_skip", "mtp", "lookahead", "prompt_lookup")
