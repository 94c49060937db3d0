"""The loop: greedy identity with plain decoding, stopping rules, seeds, and bad input."""

import copy

import pytest
import torch

from engine.loop import DecodeOptions, Decoder, generate
from framework.core.randomness import TorchSource
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.real import greedy_identity
from proposers import DraftModelProposer

ARCHS = ["llama", "qwen2", "mistral", "gpt2"]
PROMPTS = [[1, 2, 3], [40, 7, 7, 19, 2, 60, 33], [5]]


def pair(arch, dtype, seed=0):
    target = tiny_random_model(arch, seed=seed, dtype=dtype, init_std=0.3)
    draft = tiny_random_model(arch, seed=seed + 1, num_layers=1, dtype=dtype, init_std=0.3)
    return target, draft


def check_greedy_identity(arch, dtype, prompts, budget):
    target, draft = pair(arch, dtype, seed=ARCHS.index(arch))
    proposers = [
        lambda: DraftModelProposer(draft, depth=4),
        lambda: DraftModelProposer(draft, branching=2, depth=2, kind="point"),
        lambda: DraftModelProposer(draft, depth=4, stop_below=0.5),  # cut trees
        lambda: DraftModelProposer(target, depth=3),  # self-draft: every node accepted
    ]
    for prompt in prompts:
        for make in proposers:
            report = greedy_identity(target, make, torch.tensor([prompt]), budget)
            assert report.equal, (arch, dtype, prompt, report.first_difference)
            assert len(report.baseline) == budget


# Every architecture at float32 (where a tree-vs-sequential rounding difference could flip a token) and
# llama at float64; -m slow takes the other float64 ones here and every pair at 64 tokens below.
@pytest.mark.parametrize("arch, dtype", [(a, "float32") for a in ARCHS] + [("llama", "float64")] +
                         [pytest.param(a, "float64", marks=pytest.mark.slow) for a in ARCHS[1:]])
def test_greedy_identity(arch, dtype):
    check_greedy_identity(arch, dtype, PROMPTS[1:], 24)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_identity_long(arch, dtype):
    check_greedy_identity(arch, dtype, PROMPTS, 64)


def test_self_draft_accepts_everything():
    target, _ = pair("llama", "float64")
    out = generate(HFTarget(target), DraftModelProposer(target, depth=4), torch.tensor([[1, 2]]), 21,
                   SamplingConfig(), seed=0)
    assert out.stats.summary()["tokens_per_forward"] == 5.0


def test_same_seed_same_text():
    target, draft = pair("llama", "float32")
    runs = [generate(HFTarget(target), DraftModelProposer(draft, branching=2, depth=2, kind="wor"),
                     torch.tensor([[3, 4]]), 30, SamplingConfig(temperature=0.8), seed=s).tokens for s in (5, 5, 6)]
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_stops_at_eos_and_budget():
    target, draft = pair("llama", "float64")
    free = generate(HFTarget(target), DraftModelProposer(draft), torch.tensor([[1, 2, 3]]), 40, SamplingConfig(),
                    seed=1)
    eos = int(free.tokens[0, 5])
    first = free.tokens[0].tolist().index(eos)
    out = generate(HFTarget(target), DraftModelProposer(draft), torch.tensor([[1, 2, 3]]), 40, SamplingConfig(),
                   seed=1, options=DecodeOptions(eos_token_id=eos))
    assert out.tokens[0, : first + 1].tolist() == free.tokens[0, : first + 1].tolist()
    assert (out.tokens[0, first + 1 :] == -1).all()
    for budget in (1, 2, 7):
        out = generate(HFTarget(target), DraftModelProposer(draft, depth=5), torch.tensor([[1]]), budget,
                       SamplingConfig(), seed=2)
        assert out.tokens.shape == (1, budget) and (out.tokens >= 0).all()


def test_zero_new_tokens_returns_nothing():
    target, draft = pair("llama", "float32")
    out = generate(HFTarget(target), DraftModelProposer(draft), torch.tensor([[1, 2]]), 0)
    assert out.tokens.shape == (1, 0)


def test_stats_split():
    target, draft = pair("llama", "float32")
    stats = generate(HFTarget(target), DraftModelProposer(draft), torch.tensor([[1, 2]]), 20, seed=0).stats.summary()
    assert stats["steps"] >= 1 and stats["tokens_per_forward"] >= 1
    assert all(stats[k] >= 0 for k in ("draft_s", "target_s", "verify_s", "other_s"))
    assert abs(sum(stats[k] for k in ("draft_frac", "target_frac", "verify_frac", "other_frac")) - 1) < 1e-9


def test_bad_input_is_named():
    target, draft = pair("llama", "float32")
    t = HFTarget(target)
    with pytest.raises(ValueError, match="empty"):
        generate(t, None, torch.zeros(1, 0, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="context"):
        generate(t, None, torch.ones(1, 300, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="context"):
        generate(t, None, torch.ones(1, 250, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="temperature"):
        generate(t, None, torch.tensor([[1]]), 5, SamplingConfig(temperature=-1))
    with pytest.raises(ValueError, match="top_p"):
        generate(t, None, torch.tensor([[1]]), 5, SamplingConfig(top_p=0))
    with pytest.raises(ValueError, match="token ids"):
        generate(t, None, torch.tensor([[1000]]), 5)
    with pytest.raises(ValueError, match="vocabulary"):
        generate(t, DraftModelProposer(tiny_random_model("llama", vocab_size=65)), torch.tensor([[1]]), 5)
    with pytest.raises(ValueError, match="dtype"):
        generate(t, DraftModelProposer(tiny_random_model("llama", dtype="float64")), torch.tensor([[1]]), 5)
    with pytest.raises(ValueError, match="depth"):
        DraftModelProposer(draft, depth=0)
    with pytest.raises(ValueError, match="no rows"):
        generate(t, None, torch.zeros(0, 3, dtype=torch.long), 5)
    for budget in ("abc", 2.5, True, -1):
        with pytest.raises(ValueError, match="max_new_tokens must be an integer"):
            generate(t, None, torch.tensor([[1]]), budget)
    with pytest.raises(ValueError, match="padding between prompt tokens"):
        generate(t, None, torch.tensor([[0, 1, 4], [2, 3, 5]]), 5, attention_mask=torch.tensor([[1, 0, 1], [1, 1, 1]]))
    assert generate(t, None, torch.tensor([[2, 3]]), 2, attention_mask=torch.ones(1, 2)).tokens.shape == (1, 2)


def test_prompt_ids_must_be_integers():
    from framework.lm.text import encode_prompt

    for prompt in ([1.7, 2], [True, 2], ["3"]):
        with pytest.raises(ValueError, match="must be integers"):
            encode_prompt(prompt, None)
    assert encode_prompt([4, 2], None).tolist() == [[4, 2]]


def test_the_triton_verifier_without_a_gpu_says_so():
    """Without CUDA and without the interpreter, the Triton paths name the problem (a bare 'active drivers')."""
    import subprocess
    import sys

    code = ("import torch\n"
            "from framework import CandidateTree\nfrom verifiers import verify\n"
            "from verifiers.triton_rules import triton_tree_verifier\n"
            "from verifiers.triton_chain import TritonChainVerifier\n"
            "tree = CandidateTree.chain(torch.tensor([[1, 2]]), torch.full((1, 3, 5), 0.2), 'iid')\n"
            "for v in (triton_tree_verifier(), TritonChainVerifier()):\n"
            "    try:\n        verify(tree, torch.full((1, 3, 5), 0.2), verifier=v)\n"
            "    except ValueError as e:\n        print(e)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.count("runs on CUDA tensors, and the laws are on cpu") == 2, out


def test_nan_logits_are_named():
    broken = tiny_random_model("llama", seed=0)
    with torch.no_grad():
        broken.get_output_embeddings().weight.fill_(float("nan"))
    with pytest.raises(ValueError, match="NaN"):
        generate(HFTarget(broken), None, torch.tensor([[1, 2]]), 5)


def test_hidden_state_follows_the_accepted_path():
    from engine.loop import committed_rows

    per_row = torch.arange(2 * 5).reshape(2, 5, 1)  # [B, N+1, 1]: row r holds its index
    path = torch.tensor([[1, 3], [-1, -1]])  # row 0 accepted nodes 1 then 3; row 1 none
    rows = committed_rows(per_row, path)
    assert rows[..., 0].tolist() == [[0, 2, 4], [5, 5, 5]]  # root, node 1 -> row 2, node 3 -> row 4; row 1: its root
    assert committed_rows(per_row, path[:, :0])[..., 0].tolist() == [[0], [5]]  # an empty tree: the root only


def test_proposer_sees_the_hidden_states_of_every_committed_position():
    """Prefill hands over every prompt position; each step the root and the accepted nodes, in
    order, as a plain forward over the committed sequence computes them."""
    from engine.loop import Decoder
    from framework.core.randomness import TorchSource

    target = tiny_random_model("llama", seed=3, dtype="float64", init_std=0.3)
    proposer = DraftModelProposer(near_copy(target), depth=3)
    proposer.hidden_layers = (1, -1)
    prompts = torch.tensor([[1, 2, 3], [9, 8, 7]])
    decoder = Decoder(HFTarget(target), proposer, SamplingConfig(), TorchSource(seed=0))
    decoder.prefill(prompts)
    seqs, got = [prompts[b].tolist() for b in range(2)], [[] for _ in range(2)]
    for step in range(7):
        state = decoder.state
        for b in range(2):
            n = int(state.committed_count[b])
            got[b] += state.committed_hidden[b, :n].unbind(0)
            torch.testing.assert_close(state.target_hidden[b], state.committed_hidden[b, n - 1])
        if step == 6:
            break
        emitted = decoder.step()
        for b in range(2):
            seqs[b] += [int(state.root[b])] + emitted[b, : int(decoder.stats.steps[-1].accepted[b])].tolist()
    with torch.no_grad():
        for b in range(2):
            out = target(torch.tensor([seqs[b]]), output_hidden_states=True).hidden_states
            want = torch.stack([out[1][0], out[-1][0]], dim=1)  # [T, layers, H]
            torch.testing.assert_close(torch.stack(got[b]), want, rtol=1e-9, atol=1e-9)


def near_copy(model, noise: float = 0.05):
    """A draft that agrees with the target often, not always: rows accept different lengths."""
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype))
    return draft


def test_draft_cache_after_commit_matches_a_fresh_prefill():
    """The draft skips reading its deepest level; after every commit its cache must still hold exactly
    the committed tokens, per row, also where one row accepted a deepest node and another did not."""
    target = tiny_random_model("llama", seed=3, dtype="float64", init_std=0.3)
    draft = near_copy(target)
    reference = copy.deepcopy(draft)
    proposer = DraftModelProposer(draft, depth=3)
    results = []
    real_commit = proposer.commit
    proposer.commit = lambda result: results.append(result) or real_commit(result)
    prompts = torch.tensor([[1, 2, 3], [9, 8, 7], [4, 4, 4]])
    decoder = Decoder(HFTarget(target), proposer, SamplingConfig(), TorchSource(seed=0))  # every row all along
    first = decoder.prefill(prompts)
    for _ in range(8):
        decoder.step()
    query = torch.tensor([5, 6, 7])
    got = proposer.read_root(query).logits[:, -1]  # also commits what the last step deferred, as a next step would
    lengths = proposer.lm.length.tolist()
    for b in range(3):
        seq, root = prompts[b].tolist(), int(first[b])  # committed: prompt, then each root + its accepted
        for r in results:
            n = int(r.num_accepted[b])
            seq += [root, *r.tokens[b, :n].tolist()]
            root = int(r.tokens[b, n])
        assert lengths[b] == len(seq)
        with torch.no_grad():
            want = reference(torch.tensor([seq + [int(query[b])]])).logits[0, -1]
        torch.testing.assert_close(got[b], want, rtol=1e-9, atol=1e-9)
    assert len(set(lengths)) > 1  # the rows really did commit different counts
    deepest = torch.stack([st.accepted == 3 for st in decoder.stats.steps])  # [steps, B]
    assert bool((deepest.any(1) & ~deepest.all(1)).any())  # a step where only some rows need the extra read


def test_chain_of_depth_d_costs_d_draft_forwards(monkeypatch):
    target = tiny_random_model("llama", seed=3, dtype="float64", init_std=0.3)
    proposer = DraftModelProposer(near_copy(target), depth=4)
    calls = []
    real = proposer.lm.forward
    monkeypatch.setattr(proposer.lm, "forward", lambda *a, **k: calls.append(a[0].shape[1]) or real(*a, **k))
    out = generate(HFTarget(target), proposer, torch.tensor([[1, 2]]), 30, SamplingConfig(), seed=0)
    steps = out.stats.summary()["steps"]
    all_accepted = sum(int(st.accepted.item() == 4) for st in out.stats.steps)
    # 4 reads per step (root + 3 levels), the prompt read with the first root; a step that accepted its
    # deepest node hands that token to the next step's root read (2 tokens), not to a forward of its own
    assert 0 < all_accepted < steps and len(calls) == 4 * steps
    assert calls[::4] == [3] + [2 if int(st.accepted) == 4 else 1 for st in out.stats.steps[:-1]]


@pytest.mark.parametrize("settings", [dict(depth=3), dict(branching=2, depth=2, kind="wor")])
def test_copies_of_one_prefill_decode_as_the_prompt_repeated(settings):
    """Decoder.prefill(copies=6): the draft's cache stays one row until the copies part (the first root is read
    once for all) and the run emits what six repeated prompt rows emit, coin for coin (float64)."""
    target, draft = pair("llama", "float64")
    prompt, root, runs = torch.tensor([[40, 7, 7, 19, 2]]), torch.tensor([60]), []
    for copies in (6, 1):
        proposer = DraftModelProposer(draft, **settings)
        decoder = Decoder(HFTarget(target), proposer, SamplingConfig(temperature=1.0), TorchSource(seed=4))
        if copies > 1:
            decoder.prefill(prompt, copies=copies, root=root)
            assert proposer.lm.batch_size == 1 and proposer.copies == copies
        else:
            decoder.prefill(prompt.expand(6, -1), root=root.expand(6))
        runs.append(torch.cat([decoder.step() for _ in range(4)], dim=1))
        assert proposer.lm.batch_size == 6 and not proposer.copies
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("moved", ["verifier", "policy", "constraint", "eos_token_id", "logprobs"])
def test_generate_s_options_are_grouped_and_the_old_keywords_are_refused_by_name(moved):
    target = HFTarget(tiny_random_model("llama"))
    with pytest.raises(TypeError, match=rf"generate: `{moved}` is now called `options=DecodeOptions\({moved}=...\)`"):
        generate(target, None, torch.tensor([[1, 2]]), 2, **{moved: None})
    with pytest.raises(TypeError, match="options must be a DecodeOptions, got dict"):
        generate(target, None, torch.tensor([[1, 2]]), 2, options={moved: None})
    stopped = generate(target, None, torch.tensor([[1, 2]]), 4, seed=0).tokens[0, 0]  # the first token, as EOS:
    out = generate(target, None, torch.tensor([[1, 2]]), 4, seed=0, options=DecodeOptions(eos_token_id=int(stopped)))
    assert out.tokens[0].tolist() == [int(stopped), -1, -1, -1]  # the option reaches the loop
