"""One name per knob: the levels a proposer drafts are its `depth`. The draft models' `gamma` and prompt lookup's and
REST's `num_tokens` are refused by name, pointing to `depth` (framework/core/renamed.py), from code and from configs
written for the old names, never accepted silently. The draft model's `adaptive_depth` left the proposers: the
depth schedule is the policy `policy=adaptive` (any proposer gets it), and the old knob is refused naming it."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

import proposers
from framework.lm.models import tiny_random_model
from proposers import (
    CrossVocabularyProposer,
    DraftModelProposer,
    EarlyExitProposer,
    LayerSkipProposer,
    PromptLookupProposer,
    RestProposer,
    StringMatchProposer,
)
from proposers.rest.datastore import Datastore
from proposers.self_spec import SelfSpeculationProposer
from tests.composed import composed

CONF = Path(__file__).resolve().parents[2] / "conf"
OLD_NAMES = {"gamma", "gammas", "num_tokens", "adaptive_depth"}

# class -> (the positional arguments before its settings: placeholders, the refusal comes first; its old name)
RENAMED = {
    DraftModelProposer: ((None,), "gamma"),
    CrossVocabularyProposer: ((None, None), "gamma"),
    StringMatchProposer: ((None, None, None), "gamma"),
    SelfSpeculationProposer: ((), "gamma"),
    EarlyExitProposer: ((), "gamma"),
    LayerSkipProposer: ((), "gamma"),
    PromptLookupProposer: ((), "num_tokens"),
    RestProposer: ((None,), "num_tokens"),
}


@pytest.mark.parametrize("cls", list(RENAMED), ids=lambda cls: cls.__name__)
def test_the_old_name_is_refused_by_name(cls):
    """Under the class the caller named (a subclass passing its settings on would otherwise name its base)."""
    args, old = RENAMED[cls]
    with pytest.raises(TypeError, match=rf"^{cls.__name__}: `{old}` is now called `depth`$"):
        cls(*args, **{old: 2})


STORE = Datastore.from_token_ids([[1, 2, 3, 1, 2, 4]])


@pytest.mark.parametrize("method, call", [
    ("continuations", lambda: STORE.continuations([1, 2], num_tokens=2)),
    ("batched_continuations", lambda: STORE.batched_continuations(None, None, num_tokens=2))])
def test_the_rest_datastore_refuses_the_old_name_it_was_passed_as(method, call):
    with pytest.raises(TypeError, match=rf"^Datastore\.{method}: `num_tokens` is now called `depth`$"):
        call()
    assert STORE.continuations([1, 2], depth=1) == STORE.continuations([1, 2], 1) != {}


def test_depth_is_the_levels_drafted():
    """A chain of `depth` tokens (branching 1), else a full tree that deep."""
    draft = tiny_random_model()
    assert len(DraftModelProposer(draft, depth=3).levels) == 3
    tree = DraftModelProposer(draft, depth=2, branching=2)
    assert len(tree.levels) == 2 and tree.shape.num_nodes == 6
    assert PromptLookupProposer(depth=3).depth == 3 and EarlyExitProposer(depth=3).depth == 3
    assert RestProposer(Datastore.from_token_ids([[1, 2]]), depth=3).depth == 3


def test_no_proposer_constructor_takes_an_old_name():
    """One name per knob: a new class taking `gamma` or `num_tokens` would bring the second name back."""
    classes = [getattr(proposers, name) for name in proposers.__all__]
    taking = {cls.__name__: sorted(OLD_NAMES & set(inspect.signature(cls).parameters))
              for cls in classes if isinstance(cls, type)}
    assert {name: old for name, old in taking.items() if old} == {}
    assert "depth" in inspect.signature(DraftModelProposer).parameters  # the decorator keeps the signature


def keys(node) -> set[str]:
    """Every key of a config, nested ones too (a sweeper's `proposer.gamma` by its last part)."""
    if isinstance(node, DictConfig):
        own = {str(k).rsplit(".", 1)[-1] for k in node.keys()}
        return own.union(*(keys(node._get_node(k)) for k in node.keys()))
    if isinstance(node, ListConfig):
        return set().union(*(keys(node._get_node(i)) for i in range(len(node))))
    return set()


def test_no_config_names_an_old_knob():
    found = {str(p.relative_to(CONF)): sorted(OLD_NAMES & keys(OmegaConf.load(p))) for p in CONF.rglob("*.yaml")}
    assert {path: old for path, old in found.items() if old} == {}


@pytest.mark.parametrize("config, old", [("draft", "gamma"), ("draft_tree", "gamma"), ("cross_vocab", "gamma"),
                                         ("string_match", "gamma"), ("early_exit", "gamma"),
                                         ("prompt_lookup", "num_tokens"), ("rest", "num_tokens")])
def test_a_config_written_for_the_old_name_fails_naming_the_new(config, old):
    cfg = composed("config", "models=tiny", f"proposer={config}", f"+proposer.{old}=2")
    make = instantiate(cfg.proposer)  # a factory (_partial_): the constructor runs on the call
    with pytest.raises(TypeError, match=rf"`{old}` is now called `depth`"):
        make()


SCHEDULED = {DraftModelProposer: (None,), CrossVocabularyProposer: (None, None), EarlyExitProposer: (),
             LayerSkipProposer: ()}


@pytest.mark.parametrize("cls", list(SCHEDULED), ids=lambda cls: cls.__name__)
def test_the_depth_schedule_is_refused_naming_the_policy(cls):
    with pytest.raises(TypeError, match=rf"^{cls.__name__}: `adaptive_depth` .*policy=adaptive"):
        cls(*SCHEDULED[cls], adaptive_depth=8)


@pytest.mark.parametrize("config", ["draft", "early_exit", "cross_vocab"])
def test_a_config_that_schedules_the_depth_in_the_proposer_fails_naming_the_policy(config):
    make = instantiate(composed("config", "models=tiny", f"proposer={config}", "+proposer.adaptive_depth=8").proposer)
    with pytest.raises(TypeError, match="`adaptive_depth` .*policy=adaptive"):
        make()
