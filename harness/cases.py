"""The exact-harness matrix: tree shapes x kinds x sampling x adversarial target/draft pairs.

Enumeration is exact but exponential in the number of draft draws (a binary iid tree of depth 3
over 3 tokens already has 3^14 draft trees), so iid/wor trees use a small vocabulary and depth 2,
and depth 3 is covered for point trees; the largest cases are marked heavy (run under -m slow
and by `python -m experiments.exact --all`).
"""

from __future__ import annotations

from dataclasses import replace

from framework.core.sampling import SamplingConfig
from framework.core.tree_shape import TreeShape
from harness.exact import ExactCase
from harness.toy import ToyLM

SAMPLINGS = {
    "T1": SamplingConfig(),
    "T0.7": SamplingConfig(temperature=0.7),
    "topk2": SamplingConfig(top_k=2),
    "topp0.8": SamplingConfig(top_p=0.8),
    "minp0.2": SamplingConfig(min_p=0.2),
    "penalty1.5": SamplingConfig(repetition_penalty=1.5),
    "greedy": SamplingConfig(temperature=0),
}
KINDS = ("point", "iid", "wor")
# Which run takes a case, cheapest first. A rule under test declares the last tier its default run takes
# (tests/verifiers/test_verifier_contract.py): the Triton paths, run by the interpreter on CPU, "smoke"; the other
# rules "core"; the token rule, the reference, "default". -m slow takes "slow" too, --all "heavy".
TIERS = ("smoke", "core", "default", "slow", "heavy")
TIER = {
    # a spread every rule takes: each kind, zeros in p from top-k and a banned token, greedy, EOS, p == q, trees
    **dict.fromkeys(["chain3/point/topk2", "chain3/iid/topk2", "chain3/point/greedy", "zeros-in-p/point/chain3",
                     "eos/point/chain3", "binary3/point/topk2", "p==q/iid/binary2/V3", "chain1/wor/T1"], "smoke"),
    # where the rules differ: a sampled chain and its EOS, i.i.d. siblings (multi-draft), wor trees; the
    # witnesses of the planted bugs in block, traversal and multi-draft verification are among them
    **dict.fromkeys(["chain3/iid/T1", "chain3/point/T1", "eos/iid/chain3", "medusa/iid/T1/V3", "binary2/wor/T1/V3",
                     "duplicates/iid/root4", "cover-support/wor/root4"], "core"),
    # the dearest of the matrix, each with a cheaper case of the same concept in the default run
    **dict.fromkeys(["root8/point/T1/V8", "duplicates/iid/root8/V3", "binary2/iid/penalty1.5/V3", "chain4/wor/T1",
                     "zeros-in-p/iid/binary2"], "slow"),
}
MEDUSA_CHOICES = [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]


def _pair(vocab: int, seed: int = 0) -> tuple[ToyLM, ToyLM]:
    return ToyLM.random(vocab, seed), ToyLM.random(vocab, seed + 100)


def exact_cases(heavy: bool = False) -> list[ExactCase]:
    """Every lossless case must match the target's law to 1e-9; heavy=True adds the largest."""
    t4, d4 = _pair(4)
    t3, d3 = _pair(3, 7)
    cases: list[ExactCase] = []
    add = cases.append

    # Sampling settings x kinds on a chain of 3.
    for sname, cfg in SAMPLINGS.items():
        for kind in KINDS:
            add(ExactCase(f"chain3/{kind}/{sname}", t4, d4, TreeShape.chain(3), kind, cfg))
    # Chain lengths.
    for length in (1, 2, 4):
        for kind in KINDS:
            add(ExactCase(f"chain{length}/{kind}/T1", t4, d4, TreeShape.chain(length), kind))
    # Trees.
    for sname in ("T1", "T0.7", "topk2", "greedy"):
        add(ExactCase(f"binary3/point/{sname}", t4, d4, TreeShape.full(2, 3), "point", SAMPLINGS[sname]))
        add(ExactCase(f"medusa/point/{sname}", t4, d4, TreeShape.from_choices(MEDUSA_CHOICES), "point",
                      SAMPLINGS[sname]))
    for kind in ("iid", "wor"):
        for sname in ("T1", "penalty1.5"):
            add(ExactCase(f"binary2/{kind}/{sname}/V3", t3, d3, TreeShape.full(2, 2), kind, SAMPLINGS[sname]))
        add(ExactCase(f"medusa/{kind}/T1/V3", t3, d3, TreeShape.from_choices(MEDUSA_CHOICES), kind, depth=2))
    add(ExactCase("root8/point/T1/V8", *_pair(8), TreeShape.full(8, 1), "point"))
    add(ExactCase("root8/point/topk2/V8", *_pair(8), TreeShape.full(8, 1), "point", SAMPLINGS["topk2"]))

    # Adversarial target/draft pairs.
    heavy_q = t4.opposite()
    for kind in KINDS:
        add(ExactCase(f"q-heavy-where-p-light/{kind}/chain3", t4, heavy_q, TreeShape.chain(3), kind))
        add(ExactCase(f"p==q/{kind}/chain3", t4, t4, TreeShape.chain(3), kind))
    banned = ToyLM.random(4, 3, banned=1)
    for kind in KINDS:
        add(ExactCase(f"zeros-in-p/{kind}/chain3", banned, d4, TreeShape.chain(3), kind))
        add(ExactCase(f"zeros-in-p/{kind}/binary2", banned, d4, TreeShape.full(2, 2), kind, depth=2))
    add(ExactCase("p==q/iid/binary2/V3", t3, t3, TreeShape.full(2, 2), "iid"))
    add(ExactCase("cover-support/wor/root4", t4, d4, TreeShape.full(4, 1), "wor"))
    add(ExactCase("cover-support/point/root4", t4, d4, TreeShape.full(4, 1), "point"))
    peaked = ToyLM.random(4, 5, scale=4.0)  # q puts most mass on one token: many duplicate draws
    add(ExactCase("duplicates/iid/root4", t4, peaked, TreeShape.full(4, 1), "iid"))
    add(ExactCase("duplicates/iid/root8/V3", t3, ToyLM.random(3, 9, scale=4.0), TreeShape.full(8, 1), "iid", depth=1))
    # Draft and target processed differently: q is the draft's own law, p the target's.
    add(ExactCase("draft-T1-target-T0.7/iid/chain3", t4, d4, TreeShape.chain(3), "iid",
                  SAMPLINGS["T0.7"], draft_sampling=SamplingConfig()))
    add(ExactCase("greedy-target-sampled-draft/iid/chain3", t4, d4, TreeShape.chain(3), "iid",
                  SAMPLINGS["greedy"], draft_sampling=SamplingConfig()))
    # A without-replacement drafter whose law runs out of support pads with dead children.
    add(ExactCase("wor-support-runs-out/root3/draft-topk1", t4, d4, TreeShape.full(3, 1), "wor",
                  draft_sampling=SamplingConfig(top_k=1)))
    add(ExactCase("wor-support-runs-out/binary2/draft-topk2/V4", t4, d4, TreeShape.full(3, 2), "wor",
                  SamplingConfig(temperature=0.7), draft_sampling=SamplingConfig(top_k=2), depth=2))
    # EOS (token 0): nothing may follow an accepted EOS.
    for kind in KINDS:
        add(ExactCase(f"eos/{kind}/chain3", t4, d4, TreeShape.chain(3), kind, eos_token_id=0))
    add(ExactCase("eos/point/binary3", t4, d4, TreeShape.full(2, 3), "point", eos_token_id=0))

    cases = [replace(c, tier=TIER.get(c.name, "default")) for c in cases]
    if heavy:  # minutes each: exponential in the number of draft draws
        t8, d8 = _pair(8)
        cases += [ExactCase("root8/iid/T1/V3", t3, d3, TreeShape.full(8, 1), "iid", depth=2, tier="heavy"),
                  ExactCase("cover-support/wor/root8/V8", t8, d8, TreeShape.full(8, 1), "wor", depth=1, tier="heavy"),
                  ExactCase("binary2/iid/T1/V4", t4, d4, TreeShape.full(2, 2), "iid", tier="heavy"),
                  ExactCase("binary2/wor/T0.7/V4", t4, d4, TreeShape.full(2, 2), "wor", SAMPLINGS["T0.7"],
                            tier="heavy")]
    return cases


def seed_example_case(kind: str = "iid", p_equals_q: bool = False) -> ExactCase:
    """The seed example of docs/design.md section 4: p = (0.5, 0.3, 0.2), q = (0.2, 0.5, 0.3), one drafted token."""
    import torch

    p = ToyLM.unigram(torch.tensor([0.5, 0.3, 0.2]).log())
    q = p if p_equals_q else ToyLM.unigram(torch.tensor([0.2, 0.5, 0.3]).log())
    return replace(ExactCase("seed", p, q, TreeShape.chain(1), kind), depth=1)
