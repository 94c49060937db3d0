"""The project's Hydra configs composed for tests, the way its entry points compose them (one place for the
config folder and Hydra's version base)."""

import copy
import sys
from functools import cache
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

try:  # Hydra's private step that sets the value overrides after the groups; a Hydra without it: plain composes
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    apply_values = ConfigLoaderImpl._apply_overrides_to_config
except (ImportError, AttributeError):
    apply_values = None

CONF = Path(__file__).resolve().parents[1] / "conf"


def composed(config_name: str, *overrides: str) -> DictConfig:
    """What compose(config_name, overrides) returns, cheaper: a compose is ~0.1 s and tests compose the same
    groups over and over (every case of a grid, each with its own values), so the groups' config is composed once
    and copied (~5 ms; conf/ does not change while tests run), and the value overrides are applied to the copy by
    Hydra's own code, as compose applies them after composing the groups. The copy keeps a test's edits its own."""
    if apply_values is None:
        return _composed.__wrapped__(config_name, overrides)
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    values = [o for o in parsed if is_value_override(o)]
    groups = tuple(o.input_line for o in parsed if not is_value_override(o))
    cfg = copy.deepcopy(_composed(config_name, groups))
    try:
        apply_values(values, cfg)
    except OmegaConfBaseException as error:  # as compose raises it
        raise ConfigCompositionException().with_traceback(sys.exc_info()[2]) from error
    return cfg


def is_value_override(override) -> bool:
    """A plain value set, added or deleted (proposer.depth=2, output_dir=..., ~experiment.x): not a config group's
    choice (a group is a folder of conf/; Hydra's own and packaged ones stay with the compose), nor a sweep."""
    key = override.key_or_group
    return (override.package is None and not override.is_sweep_override() and "/" not in key
            and key.split(".")[0] != "hydra" and not (CONF / key).is_dir())


@cache
def _composed(config_name: str, overrides: tuple[str, ...]) -> DictConfig:
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
