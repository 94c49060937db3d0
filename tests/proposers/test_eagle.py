"""EagleProposer: lossless through the shared verifier, the head's features follow the accepted
path, training unrolls exactly what decoding computes, the dynamic tree is EAGLE-2's, bad input."""

import math

import pytest
import torch
from eagle_recording import Recording

from engine.loop import Decoder, generate
from framework.core.proposer import DecodeState
from framework.core.randomness import TorchSource
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.real import greedy_identity
from proposers import EagleProposer, MtpProposer
from proposers.eagle.head import EagleHead, random_head
from proposers.eagle.proposer import HeadReader
from proposers.eagle.training import unroll
from proposers.eagle.tree import dynamic_tree
from proposers.mtp.head import random_mtp

ARCHS = ["llama", "qwen2", "mistral", "gpt2"]
CHOICES = [(0,), (1,), (0, 0), (1, 0), (0, 1), (0, 0, 0)]


def head_for(model, layers=(-1,), seed=0, scale=1.0):
    """EAGLE-1 for the last layer; otherwise EAGLE-3 fusing `layers`, over 3/4 of the vocabulary."""
    c = model.config
    eagle1 = tuple(layers) == (-1,)
    return random_head(c.hidden_size, c.vocab_size, c.num_hidden_layers, layers, "eagle" if eagle1 else "eagle3",
                       None if eagle1 else c.vocab_size * 3 // 4, seed=seed, scale=scale,
                       dtype=str(next(model.parameters()).dtype).removeprefix("torch."))


def static(head):
    return lambda: EagleProposer(head, CHOICES)


def dynamic(head):
    return lambda: EagleProposer(head, None, top_k=3, depth=3, budget=7)


@pytest.mark.parametrize("arch", [a if a in ("llama", "gpt2") else pytest.param(a, marks=pytest.mark.slow)
                                  for a in ARCHS])
def test_greedy_identity(arch):
    target = tiny_random_model(arch, seed=3, dtype="float64", init_std=0.3)
    for layers in ((-1,), (0, 1, -1)):  # EAGLE-1's last layer; EAGLE-3's fusion of three
        head = head_for(target, layers)
        for make in (static(head), dynamic(head)):
            report = greedy_identity(target, make, torch.tensor([[4, 9, 2]]), 24)
            assert report.equal, (arch, layers, report.first_difference)


def test_batched_rows_each_decode_as_alone():
    """B = 2 rows with different accepted lengths give each row's own greedy text."""
    target = tiny_random_model("llama", seed=3, vocab_size=8, dtype="float64", init_std=0.3)
    head = head_for(target)
    prompts = torch.tensor([[4, 1, 2], [1, 1, 5]])
    greedy = SamplingConfig(temperature=0.0)
    plain = generate(HFTarget(target), None, prompts, 20, greedy).tokens
    for make in (static(head), dynamic(head)):
        out = generate(HFTarget(target), make(), prompts, 20, greedy)
        assert torch.equal(out.tokens, plain)
        accepted = out.stats.per_row(2)  # [steps, B], -1 once a row finished and left the batch
        both = (accepted >= 0).all(1)
        assert bool((accepted[both, 0] != accepted[both, 1]).any())  # the rows did accept different counts


@pytest.mark.parametrize("layers", [(-1,), (0, 2)])
def test_head_reads_the_targets_features_of_every_committed_position(layers):
    """At each step the head's output at the root equals a fresh run of the head over the whole
    committed sequence with the target's own features, per row, with rows accepting different counts."""
    target = tiny_random_model("llama", seed=3, vocab_size=8, dtype="float64", init_std=0.3)
    head = head_for(target, layers)
    proposer = Recording(head, None, top_k=3, depth=3, budget=7)
    prompts = torch.tensor([[4, 1, 2], [1, 1, 5]])
    decoder = Decoder(HFTarget(target), proposer, SamplingConfig(), TorchSource(seed=0))  # both rows all along
    decoder.prefill(prompts)
    for _ in range(10):
        decoder.step()
    embed = head.embedding(target.get_input_embeddings())
    accepted = torch.stack([r.num_accepted for r in proposer.results])  # [steps, B]
    assert len(set(accepted.sum(0).tolist())) > 1 or bool((accepted[:, 0] != accepted[:, 1]).any())
    for b in range(2):
        seq = prompts[b].tolist()
        for step, (roots, got) in enumerate(proposer.roots):
            blocks = torch.tensor([seq + [int(roots[b])]])
            with torch.no_grad():
                states = target(blocks, output_hidden_states=True).hidden_states
                want = unroll(head, embed, torch.stack([states[i] for i in layers], 2), blocks, 1)[0][0, -1]
            torch.testing.assert_close(got[b], want, rtol=1e-9, atol=1e-9)
            if step < len(proposer.results):
                r = proposer.results[step]
                seq += [int(roots[b])] + r.tokens[b, : int(r.num_accepted[b])].tolist()


@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_training_unrolls_what_drafting_computes(kind):
    """unroll step j at position t == the head drafting a chain from t fed the text's tokens (an EAGLE-3 head; an
    MTP module, trained by the same unroll, reading the target's last hidden state)."""
    target = tiny_random_model("llama", seed=3, dtype="float64", init_std=0.3)
    if kind == "mtp":
        head, layers, make = random_mtp(target.config, dtype="float64"), (-1,), MtpProposer
    else:
        head, layers, make = head_for(target, (0, 2)), (0, 2), lambda head: EagleProposer(head, None)
    blocks = torch.tensor([[5, 9, 1, 33, 7, 2, 40, 8, 8, 3]])
    with torch.no_grad():
        states = target(blocks, output_hidden_states=True).hidden_states
        outs = unroll(head, target.get_input_embeddings(), torch.stack([states[i] for i in layers], 2), blocks, 3)
    for t in (2, 5):
        hf = HFTarget(target)
        hf.provide_hidden(head.config.target_layers)
        prefill = hf.prefill(blocks[:, : t + 1])
        proposer = make(head)
        proposer.prefill(blocks[:, : t + 1], hf)
        state = DecodeState(blocks[:, t + 1], torch.zeros(1, 64, dtype=torch.bool), SamplingConfig(), TorchSource(0),
                            None, prefill.hidden, torch.tensor([t + 1]))
        with torch.no_grad():
            reader = HeadReader(proposer, proposer.catch_up(state))
            torch.testing.assert_close(reader.features[-1][0], outs[0][0, t])
            reader.read([0], [-1], blocks[:, t + 2 : t + 3], [1])
            reader.read([1], [0], blocks[:, t + 3 : t + 4], [2])
        torch.testing.assert_close(reader.features[0][0], outs[1][0, t])
        torch.testing.assert_close(reader.features[1][0], outs[2][0, t])


def test_dynamic_tree_is_eagle2s_rerank():
    """Beam of top_k per depth by cumulative log-probability, then the best `budget` of all drafted
    nodes; checked against a brute-force enumeration of what EAGLE-2 drafts."""
    V, k, depth, budget = 6, 2, 3, 5
    table = torch.randn(V, V, generator=torch.Generator().manual_seed(0)) * 2
    root = torch.randn(1, V, generator=torch.Generator().manual_seed(1)) * 2
    tokens, parents, _ = dynamic_tree(lambda n, p, t, d: table[t], root, k, depth, budget)  # a bigram draft
    logp, lp_root = table.log_softmax(-1), root[0].log_softmax(-1)
    # brute force: drafted nodes as (path of tokens, score)
    drafted = [((int(t),), float(lp_root[t])) for t in lp_root.topk(k).indices]
    beam = drafted
    for _ in range(2, depth + 1):
        children = [(path + (int(c),), s + float(logp[path[-1], c]))
                    for path, s in beam for c in logp[path[-1]].topk(k).indices]
        drafted += children
        beam = sorted(children, key=lambda x: -x[1])[:k]
    best = sorted(drafted, key=lambda x: (-x[1], len(x[0])))[:budget]
    got = []
    for i in range(tokens.shape[1]):
        path, node = [], i
        while node >= 0:
            path.append(int(tokens[0, node]))
            node = int(parents[node])
        got.append(tuple(path[::-1]))
    assert sorted(got) == sorted(p for p, _ in best)
    assert all(int(p) < i for i, p in enumerate(parents.tolist()))  # a topologically ordered tree


def test_dynamic_tree_reads_depth_minus_one_levels_of_top_k():
    table = torch.randn(6, 6, generator=torch.Generator().manual_seed(0))
    calls = []
    dynamic_tree(lambda n, p, t, d: calls.append(n) or table[t], torch.randn(1, 6), 3, 4, 10)
    assert [len(c) for c in calls] == [3, 3, 3]  # depths 1..3 read their beam; depth 4 is never read


def test_bad_input_is_named(tmp_path):
    target = tiny_random_model("llama", seed=3)
    other = tiny_random_model("llama", seed=3, hidden_size=16, num_layers=3)
    head = head_for(other)
    with pytest.raises(ValueError, match="hidden size 16 .this target: 32.*layer count 3 .this target: 2"):
        generate(HFTarget(target), EagleProposer(head, CHOICES), torch.tensor([[1, 2]]), 4)
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}.*training=zoo_eagle"):
        EagleHead.load(tmp_path)
    with pytest.raises(ValueError, match="choices is empty"):
        EagleProposer(head_for(target), [])
    with pytest.warns(UserWarning, match="no budget measured for this head"):  # a head without eagle_tree.json:
        assert EagleProposer(head_for(target), None, budget="auto").budget == 60  # EAGLE's published default
    with pytest.raises(ValueError, match="outside the target's hidden states"):
        random_head(32, 64, 2, (5,))


def test_save_and_load_round_trip(tmp_path):
    target = tiny_random_model("llama", seed=3)
    head = head_for(target, (0, -1))
    head.save(tmp_path, dtype=torch.float32)
    loaded = EagleHead.load(tmp_path)
    assert loaded.config == head.config
    for (name, a), b in zip(head.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    assert math.isclose(sum(p.numel() for p in loaded.parameters()), sum(p.numel() for p in head.parameters()))


@pytest.mark.parametrize("make", [static, dynamic])
def test_eagle3_never_proposes_a_token_outside_its_draft_vocabulary(make):
    """Its logits are -inf off the draft vocabulary (t2d False): no such token in any tree, B = 2."""
    target = tiny_random_model("llama", seed=3, dtype="float64", init_std=0.3)
    head = head_for(target, (0, 1, 2), scale=3.0)
    trees = []

    class Keeping(EagleProposer):
        def propose(self, state):
            trees.append(super().propose(state))
            return trees[-1]

    proposer = Keeping(head, CHOICES if make is static else None, top_k=3, depth=3, budget=7)
    generate(HFTarget(target), proposer, torch.tensor([[4, 9, 2], [7, 1, 1]]), 16)
    proposed = torch.cat([t.tokens.flatten() for t in trees])
    assert proposed.numel() > 50 and bool(head.t2d[proposed].all())
    assert int(head.t2d.sum()) == 48 and not bool(head.t2d.all())


def test_auto_settings_come_from_the_head():
    target = tiny_random_model("llama", seed=3)
    head = head_for(target)
    head.searched = {"choices": [[0], [0, 0]], "top_k": 2, "depth": 3, "budget": 5}
    static = EagleProposer(head, "auto")
    assert static.shape.num_nodes == 2
    dynamic = EagleProposer(head, None, "auto", "auto", "auto")
    assert (dynamic.top_k, dynamic.depth, dynamic.budget) == (2, 3, 5)


def test_a_target_reused_for_plain_decoding_after_eagle():
    """experiments reuse one HFTarget for the speculative and the plain run: plain decoding then
    asks for no hidden states and gives plain greedy's tokens."""
    target = tiny_random_model("llama", seed=3, dtype="float64", init_std=0.3)
    hf, prompt, greedy = HFTarget(target), torch.tensor([[4, 9, 2]]), SamplingConfig(temperature=0.0)
    spec = generate(hf, dynamic(head_for(target))(), prompt, 12, greedy).tokens
    plain = generate(hf, None, prompt, 12, greedy).tokens
    assert torch.equal(spec, plain) and torch.equal(plain, generate(HFTarget(target), None, prompt, 12, greedy).tokens)
    assert hf.lm.hidden_layers == ()
