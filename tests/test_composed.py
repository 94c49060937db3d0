"""tests/composed.py composes each set of config groups once and sets the values on a copy: what it returns must be
what Hydra's compose returns for the same overrides, and each call's config its own."""

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tests.composed import CONF, _composed, apply_values, composed

OVERRIDES = [
    ("config", ()),
    ("config", ("models=tiny", "proposer=draft_tree", "proposer.depth=2", "sampling=greedy")),
    ("check", ("models=toy", "policy=adaptive", "policy.max_depth=3", "~experiment.exact.samplings.t07_topk2")),
    ("config", ("proposer=medusa", "+proposer.extra=1", "seed=7", "verifier=block")),
    ("compare", ("experiment=bench_hf", "experiment.per_category=1", "experiment.methods=[plain,draft]")),
]


@pytest.mark.parametrize("config_name, overrides", OVERRIDES)
def test_the_cached_compose_is_hydras(config_name, overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        want = compose(config_name=config_name, overrides=list(overrides))
    got = composed(config_name, *overrides)
    assert OmegaConf.to_yaml(got) == OmegaConf.to_yaml(want)
    assert OmegaConf.is_struct(got) == OmegaConf.is_struct(want)


def test_the_fixed_policy_is_no_policy_object():
    """The proposer contract's exact law sets policy=fixed as `policy: null` on the groups' compose it shares with the
    method's other tests: the same config as composing the option."""
    swapped = composed("check", "models=tiny", "proposer=draft_tree")
    swapped.policy = None
    assert OmegaConf.to_yaml(swapped) == OmegaConf.to_yaml(composed("check", "models=tiny", "proposer=draft_tree",
                                                                    "policy=fixed"))


def test_each_call_gets_its_own_copy():
    first = composed("config", "models=tiny", "seed=3")
    first.seed = 99
    assert composed("config", "models=tiny", "seed=3").seed == 3 and composed("config", "models=tiny").seed == 0
    assert apply_values is None or _composed.cache_info().hits > 0  # the groups were composed once


def test_a_bad_value_fails_as_compose_fails():
    with pytest.raises(Exception, match="no_such_key"):
        composed("config", "proposer.no_such_key=1")
