"""The harness on real (tiny) Hugging Face models, through HFTarget, the loop and DraftModelProposer."""

import pytest
import torch

from framework.control.adaptive import AdaptiveDepth
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.exact import compare
from harness.real import exact_loop_law, statistical_check, teacher_forced_law
from harness.stats import sample_size_for_law
from proposers import DraftModelProposer
from verifiers import typical_verifier

TOY = dict(vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, dtype="float64", init_std=0.3)
TARGET, DRAFT = tiny_random_model("llama", seed=0, **TOY), tiny_random_model("llama", seed=1, **TOY)
PROMPT = torch.tensor([[1, 2, 0]])
STOP = 0.45  # a confidence cut that these toy laws cross both ways (see test_confidence_stop_cuts_some_trees)
SAMPLINGS = {"T1": SamplingConfig(), "T0.7-topk2": SamplingConfig(temperature=0.7, top_k=2),
             "penalty1.5": SamplingConfig(repetition_penalty=1.5),
             "T0.7-topp0.9": SamplingConfig(temperature=0.7, top_p=0.9)}  # the order of the two matters on this toy
PROPOSERS = {"chain2-iid": dict(depth=2, kind="iid"), "chain2-wor": dict(depth=2, kind="wor"),
             "chain3-point": dict(depth=3, kind="point"), "tree2x2-point": dict(branching=2, depth=2, kind="point")}
STOPPED = dict(depth=3, kind="iid", stop_below=STOP)


def tv_of(sampling, verifier=None, target_factory=HFTarget, law_depth=3, policy=None, **proposer):
    """The exact loop law's TV from the target's, over the first `law_depth` tokens; `proposer`: DraftModelProposer's
    settings (its own `depth` among them: the two were one keyword, so a tree's depth set the law's); `policy`: a
    factory of the speculation policy."""
    extra = {} if verifier is None else {"verifier": verifier}
    extra |= {} if policy is None else {"policy_factory": policy}
    spec = exact_loop_law(TARGET, lambda: DraftModelProposer(DRAFT, **proposer), PROMPT, law_depth, sampling,
                          target_factory=target_factory, **extra)
    return compare(spec, teacher_forced_law(TARGET, PROMPT, law_depth, sampling))


@pytest.mark.parametrize("sname", SAMPLINGS)
@pytest.mark.parametrize("pname", PROPOSERS)
def test_exact_law_through_the_real_loop(pname, sname):
    result = tv_of(SAMPLINGS[sname], **PROPOSERS[pname])
    assert result.passes(1e-9), (pname, sname, result.tv)


# The cut and the schedule couple the rows (one shape for all), so their worlds are enumerated one
# at a time: the law of 2 or 3 tokens keeps that to ~10 s a case.
@pytest.mark.parametrize("sname", [pytest.param(s, marks=[] if s == "T1" else [pytest.mark.slow]) for s in SAMPLINGS])
def test_exact_law_with_confidence_stop(sname):
    assert tv_of(SAMPLINGS[sname], law_depth=2, **STOPPED).passes(1e-9)


def test_exact_law_with_adaptive_depth():
    """Under the depth schedule (policy=adaptive), starting at one level, a step that accepted it drafts three: the
    depth of every step but the first follows the acceptance before it."""
    schedule = lambda: AdaptiveDepth(max_depth=3, first_depth=1)  # noqa: E731
    assert tv_of(SAMPLINGS["T1"], law_depth=3, depth=3, kind="iid", policy=schedule).passes(1e-9)


def test_confidence_stop_cuts_some_trees():
    """The exact case above covers cut and uncut trees: sizes 1 to 3 all occur."""
    from engine.loop import generate

    sizes = set()

    class Recording(DraftModelProposer):
        def propose(self, state):
            tree = super().propose(state)
            sizes.add(tree.num_nodes)
            return tree

    for seed in range(20):
        generate(HFTarget(TARGET), Recording(DRAFT, depth=3, stop_below=STOP), PROMPT, 6, SamplingConfig(), seed=seed)
    assert sizes == {1, 2, 3}, sizes


@pytest.mark.slow
def test_exact_law_wor_tree():
    assert tv_of(SAMPLINGS["T1"], branching=2, depth=2, kind="wor").passes(1e-9)


def test_plain_decoding_law_is_exact():
    spec = exact_loop_law(TARGET, None, PROMPT, 3, SAMPLINGS["T1"])
    assert compare(spec, teacher_forced_law(TARGET, PROMPT, 3, SAMPLINGS["T1"])).passes(1e-9)


def test_typical_acceptance_fails_through_the_loop():
    assert tv_of(SAMPLINGS["T1"], verifier=typical_verifier(), depth=2, kind="iid").tv > 1e-3


@pytest.mark.stat
@pytest.mark.parametrize("tv", [0.1, pytest.param(0.05, marks=pytest.mark.slow)])
def test_statistical_check_real_models(tv):
    """G-test of the first 3 tokens of a vocab-64 model, N sized for power 0.9 at the cells the law has; the lossy
    baseline fails at the same N."""
    target = tiny_random_model("llama", seed=0, dtype="float32", init_std=0.3)
    draft = tiny_random_model("llama", seed=1, num_layers=1, dtype="float32", init_std=0.3)
    prompt = torch.tensor([[1, 2, 3]])
    law = teacher_forced_law(target, prompt, 3, SamplingConfig(), min_prob=1e-7)
    n, dof = sample_size_for_law(law, tv)
    exact = statistical_check(target, lambda: DraftModelProposer(draft, depth=3), prompt, SamplingConfig(), n, seed=0,
                              law=law)
    lossy = statistical_check(target, lambda: DraftModelProposer(draft, depth=3), prompt, SamplingConfig(), n, seed=0,
                              verifier=typical_verifier(), law=law)
    assert exact.test.dof == dof and exact.test.power(tv) >= 0.9
    assert exact.passes(), exact.test
    assert not lossy.passes(), lossy.test


@pytest.mark.parametrize("sampling", list(SAMPLINGS.values()), ids=list(SAMPLINGS))
def test_teacher_forced_law_does_not_depend_on_chunking_or_the_prompt_cache(sampling):
    """Chunks of prefixes share one HF prompt cache; one prefix per chunk, or a one-token prompt, must agree."""
    law = teacher_forced_law(TARGET, PROMPT, 3, sampling, chunk=256)
    one_by_one = teacher_forced_law(TARGET, PROMPT, 3, sampling, chunk=1)
    assert law.keys() == one_by_one.keys() and abs(sum(law.values()) - 1) < 1e-12
    assert max(abs(law[k] - one_by_one[k]) for k in law) < 1e-12
    short = teacher_forced_law(TARGET, PROMPT[:, :1], 2, sampling, chunk=2)  # no cache at all
    assert abs(sum(short.values()) - 1) < 1e-12 and all(len(k) == 2 for k in short)
    lumped = teacher_forced_law(TARGET, PROMPT, 3, sampling, min_prob=0.05)
    assert abs(sum(lumped.values()) - 1) < 1e-12 and all(v >= 0.05 for k, v in lumped.items() if k != ("other",))
