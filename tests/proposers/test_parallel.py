"""Parallel drafters (DFlash, PARD, P-EAGLE): one draft forward per step, exact through the real loop, greedy
identity on four architectures, training scores exactly the laws decoding draws from, files, bad input."""

from __future__ import annotations

import pytest
import torch

from engine.loop import generate
from framework.core.proposer import DecodeState
from framework.core.randomness import TorchSource
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.exact import compare
from harness.real import exact_loop_law, greedy_identity, teacher_forced_law
from proposers.eagle.head import random_head
from proposers.eagle.parallel import ParallelEagleProposer
from proposers.parallel.dflash import DFlashDrafter, random_dflash
from proposers.parallel.dflash_proposer import DFlashProposer
from proposers.parallel.pard import ParallelDraftProposer
from proposers.parallel.training import DFlashObjective, ParallelTrainConfig, PardObjective, PEagleObjective

ARCHS = ["llama", "qwen2", "mistral", "gpt2"]
TREE = [(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]


def target_model(arch="llama", vocab=64, dtype="float64", seed=0):
    return tiny_random_model(arch=arch, vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                             dtype=dtype, seed=seed)


def parts(model, depth=3, scale=1.0):
    """(name -> a factory of a fresh proposer, given choices and kind) for each drafter, random weights fitted to
    `model`."""
    c = model.config
    H, V, L = c.hidden_size, c.vocab_size, c.num_hidden_layers
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    dflash = random_dflash(H, V, L, block_size=depth + 1, dtype=dtype, scale=scale)
    draft = tiny_random_model(arch="llama", vocab_size=V + 1, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                              dtype=dtype, seed=1, init_std=0.3)
    draft.config.pard_token = V
    head = random_head(H, V, L, list(range(L + 1))[-3:], "eagle3", max(2, V * 3 // 4), dtype=dtype, scale=scale,
                       pard_token=0)
    return {
        "dflash": lambda choices=None, kind="iid": DFlashProposer(dflash, choices, kind,
                                                                  depth=None if choices else depth),
        "pard": lambda choices=None, kind="iid": ParallelDraftProposer(draft, choices, kind, depth=depth),
        "peagle": lambda choices=None, kind="iid": ParallelEagleProposer(head, choices, depth, kind),
    }


DRAFTERS = ["dflash", "pard", "peagle"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_greedy_is_plain_greedy(arch, drafter):
    model = target_model(arch)
    make = parts(model)[drafter]
    for choices, kind in ((None, "iid"), (TREE, "point")):
        report = greedy_identity(model, lambda: make(choices, kind), torch.tensor([[4, 9, 2], [7, 7, 1]]), 20)
        assert report.equal, (drafter, arch, kind, report)


TOY = dict(arch="llama", vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, dtype="float64",
           seed=0, init_std=0.3)
PROMPT = torch.tensor([[1, 2, 0]])


def loop_tv(make, sampling=SamplingConfig()) -> float:
    toy = tiny_random_model(**TOY)
    return compare(exact_loop_law(toy, make, PROMPT, 3, sampling), teacher_forced_law(toy, PROMPT, 3, sampling)).tv


@pytest.mark.parametrize("drafter", DRAFTERS)
@pytest.mark.parametrize("kind,choices",
                         [("iid", None), ("point", [(0,), (1,), (0, 0)]), ("wor", [(0,), (1,), (0, 0)])])
def test_the_loop_law_is_the_targets(drafter, kind, choices):
    make = parts(tiny_random_model(**TOY), scale=2.0)[drafter]
    assert loop_tv(lambda: make(choices, kind)) < 1e-9


class WrongPositionQ(DFlashProposer):
    """Planted bug: each chain node drawn from its position's law, but the verifier told the law of the position
    before."""

    def propose(self, state):
        tree = super().propose(state)
        if tree.draft_probs is not None and tree.num_nodes > 1:
            tree.draft_probs[:, 1:] = tree.draft_probs[:, :-1].clone()  # depth d's nodes get depth d-1's law
        return tree


def test_a_q_from_the_wrong_position_is_caught():
    drafter = random_dflash(16, 3, 1, block_size=4, dtype="float64", scale=2.0)
    assert loop_tv(lambda: DFlashProposer(drafter, kind="iid")) < 1e-9
    assert loop_tv(lambda: WrongPositionQ(drafter, kind="iid")) > 1e-4


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_one_draft_forward_per_step(drafter):
    model = target_model()
    proposer = parts(model, depth=4)[drafter]()
    out = generate(HFTarget(model), proposer, torch.tensor([[4, 9, 2], [1, 2, 3]]), 24, SamplingConfig())
    drafting = sum(1 for s in out.stats.steps if s.nodes > 0)
    assert drafting > 3 and proposer.forwards == drafting


# ---- training scores exactly what decoding draws from -----------------------------------------------
def decode_laws(proposer, model, prompt: torch.Tensor, root: torch.Tensor, depth: int) -> torch.Tensor:
    """The proposer's per-depth log-laws [depth, V] for `prompt` [1, L] then `root`, after one prefill."""
    target = HFTarget(model, hidden_layers=proposer.hidden_layers) if proposer.hidden_layers else HFTarget(model)
    proposer.prefill(prompt, target)
    state = DecodeState(root, torch.zeros(1, model.config.vocab_size, dtype=torch.bool), SamplingConfig(),
                        TorchSource(0))
    if proposer.hidden_layers:
        out = model(input_ids=prompt, output_hidden_states=True)
        hidden = torch.stack([out.hidden_states[i] for i in proposer.hidden_layers], dim=2)
        state.committed_hidden, state.committed_count = hidden, torch.tensor([prompt.shape[1]])
    logits = {"dflash": lambda: proposer.block_logits(hidden, state.committed_count, root, depth),
              "pard": lambda: proposer.block_logits(root[:, None], depth),
              "peagle": lambda: proposer.parallel_logits(state, depth)}[proposer_kind(proposer)]()
    return logits[0].log_softmax(-1)


def proposer_kind(proposer) -> str:
    return {DFlashProposer: "dflash", ParallelDraftProposer: "pard", ParallelEagleProposer: "peagle"}[type(proposer)]


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_training_scores_the_laws_decoding_draws(drafter):
    """At an anchor, the objective's per-depth draft laws (packed blocks, cut attention) equal the proposer's
    (incremental, cached) for the same context."""
    model, depth = target_model(), 3
    proposer = parts(model, depth)[drafter]()
    module = {"dflash": lambda p: p.drafter, "pard": lambda p: p.lm.model,
              "peagle": lambda p: p.head}[drafter](proposer)
    objective = {"dflash": DFlashObjective, "pard": PardObjective, "peagle": PEagleObjective}[drafter](
        model, {"m": module}, ParallelTrainConfig(depth=depth, anchors=2))
    ids = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(3))
    a = 9
    # the root is x[a] for DFlash and PARD; P-EAGLE's anchor is the root's head position, reading x[a + 1]
    L = a + 1 if drafter == "peagle" else a
    laws = decode_laws(proposer, model, ids[:, :L], ids[:, L], depth)
    pairs = objective.pairs(module, ids, torch.ones_like(ids, dtype=torch.bool), torch.tensor([[4, a]]),
                            objective.teacher(ids))
    # anchor a is each block depth's last row; PARD's and P-EAGLE's depth 1 is the sequence's row a
    rows = [a if j == 0 and drafter != "dflash" else -1 for j in range(depth)]
    trained = torch.stack([q[row] for (q, _, _), row in zip(pairs, rows)]).double()
    vocab = module.draft_ids() if drafter == "peagle" else None
    decoded = laws if vocab is None else laws[:, vocab]
    assert torch.allclose(trained.exp(), decoded.exp(), atol=1e-6), (trained.exp() - decoded.exp()).abs().max()
    # and scores them against the target's law of the token each depth drafts after the root x[L]: x[L + j], predicted
    # at L + j - 1
    z = model(input_ids=ids).logits[0].double()
    z = z if vocab is None else z[:, vocab]
    teacher = torch.stack([p[row] for (_, p, _), row in zip(pairs, rows)]).double()
    assert torch.allclose(teacher.exp(), z[L : L + depth].softmax(-1), atol=1e-6)
    labels = torch.stack([y[row] for (_, _, y), row in zip(pairs, rows)])
    assert labels.tolist() == (ids[0, L + 1 : L + 1 + depth] if vocab is None else torch.searchsorted(
        vocab, ids[0, L + 1 : L + 1 + depth]).clamp_max(len(vocab) - 1)).tolist()


def test_dflash_context_cache_keeps_what_one_forward_reads():
    """Two steps of context, cached, give the laws one forward over the whole context gives."""
    model = target_model()
    drafter = random_dflash(32, 64, 2, block_size=4, dtype="float64")
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    out = model(input_ids=ids, output_hidden_states=True)
    layers = drafter.config.hidden_layers
    hidden = torch.stack([out.hidden_states[i] for i in layers], dim=2)  # [2, 12, L, H]
    whole, steps = DFlashProposer(drafter), DFlashProposer(drafter)
    for p in (whole, steps):
        p.prefill(ids[:, :1], HFTarget(model, hidden_layers=layers))
    root = ids[:, 11]
    one = whole.block_logits(hidden[:, :11], torch.tensor([11, 11]), root, 3)
    steps.block_logits(hidden[:, :7], torch.tensor([7, 5]), ids[:, 7], 3)  # row 1 committed fewer: a hole
    ragged = torch.zeros_like(hidden[:, :6])
    ragged[0, :4], ragged[1, :6] = hidden[0, 7:11], hidden[1, 5:11]
    two = steps.block_logits(ragged, torch.tensor([4, 6]), root, 3)
    assert torch.allclose(one, two, atol=1e-9)


# ---- files and bad input ------------------------------------------------------------------------------
def test_dflash_files_round_trip_in_the_published_layout(tmp_path):
    import json
    drafter = random_dflash(32, 64, 2, block_size=5, mask_token_id=7)
    drafter.save(tmp_path, dtype=torch.float32)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["dflash_config"] == {"block_size": 5, "mask_token_id": 7,
                                       "target_layer_ids": list(drafter.config.target_layer_ids)}
    loaded = DFlashDrafter.load(tmp_path)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in drafter.state_dict().items())
    with pytest.raises(FileNotFoundError, match="training=zoo_dflash"):
        DFlashDrafter.load(tmp_path / "missing")


def test_bad_input_is_named():
    model = target_model()
    with pytest.raises(ValueError, match="made for a target"):
        generate(HFTarget(model), DFlashProposer(random_dflash(32, 65, 2)), torch.tensor([[1, 2]]), 4)
    with pytest.raises(ValueError, match="depth must lie in 1..3"):
        DFlashProposer(random_dflash(32, 64, 2, block_size=4), depth=4)
    with pytest.raises(ValueError, match="is 3 deep but the drafter predicts 2"):
        DFlashProposer(random_dflash(32, 64, 2, block_size=3), [(0,), (0, 0), (0, 0, 0)])
    with pytest.raises(ValueError, match="pard_token"):
        ParallelDraftProposer(target_model(vocab=64, seed=2))
    with pytest.raises(ValueError, match="no parent|has no parent|parent"):
        ParallelDraftProposer(target_model(vocab=65, seed=2), [(0, 0)], mask_token=64)
    with pytest.raises(ValueError, match="pard_token"):
        ParallelEagleProposer(random_head(32, 64, 2, [0, 1, 2], "eagle3", 48))
    with pytest.raises(ValueError, match="block_size must be >= 2"):
        random_dflash(32, 64, 2, block_size=1)


def test_peagle_heads_round_trip_in_ours_and_speculators_layout(tmp_path):
    import json

    from proposers import load_head
    head = random_head(32, 64, 2, [0, 1, 2], "eagle3", 48, pard_token=5)
    for fmt in ("speculum", "speculators"):
        head.save(tmp_path / fmt, dtype=torch.float32, format=fmt)
        loaded = load_head(tmp_path / fmt)
        assert loaded.config.pard_token == 5 and torch.equal(loaded.mask_hidden, head.mask_hidden), fmt
    config = json.loads((tmp_path / "speculators" / "config.json").read_text())
    assert config["speculators_model_type"] == "peagle" and config["mask_token_id"] == 5
    random_dflash(32, 64, 2).save(tmp_path / "dflash")
    assert isinstance(load_head(tmp_path / "dflash"), DFlashDrafter)
