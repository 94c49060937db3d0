"""Published EAGLE-1/2 and EAGLE-3 folders (SafeAILab, SpecForge) load through proposers.load_head and
compute what the published description says (the reference forwards of published_fixtures), decode
losslessly, and refuse what they cannot honour by name. Built offline: no hub is reached."""

import warnings

import pytest
import torch
from eagle_recording import Recording
from published_fixtures import eagle1_folder, eagle1_reference, eagle3_folder, eagle3_reference, load_state

from engine.loop import Decoder, generate
from framework.core.randomness import TorchSource
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.exact import compare
from harness.real import exact_loop_law, greedy_identity, teacher_forced_law
from proposers import EagleProposer, load_head
from proposers.eagle.head import Eagle1Head, Eagle3Head

TARGET = tiny_random_model("llama", seed=3, num_layers=8, dtype="float64", init_std=0.3)  # H 32, V 64, 4 / 2 heads
CHOICES = [(0,), (1,), (0, 0), (1, 0), (0, 1), (0, 0, 0)]
# rows accept often
SMALL = tiny_random_model("llama", seed=3, vocab_size=8, num_layers=8, dtype="float64", init_std=0.3)
TOKENS = torch.tensor([[5, 9, 1, 33, 7, 2]])
TOL = 1e-5  # float64 heads, but transformers computes RoPE's cos/sin in float32: the float32 bound


def states(model, tokens):
    with torch.no_grad():
        return model(tokens, output_hidden_states=True).hidden_states


@pytest.mark.parametrize("weights", ["pytorch_model.bin", "model.safetensors"])
def test_eagle1_matches_the_published_forward(tmp_path, weights):
    """E1: no input norm, no final norm, fc with bias, the target's embedding and lm_head."""
    folder = eagle1_folder(tmp_path, TARGET, weights=weights)
    head = load_head(folder, "float64")
    assert isinstance(head, Eagle1Head) and head.config.fc_bias and head.config.num_kv_heads == 2
    e = TARGET.get_input_embeddings()(TOKENS[:, 1:])
    g = states(TARGET, TOKENS)[-1][:, :-1]
    with torch.no_grad():
        got = head(e, g, torch.arange(5)[None])
    want = eagle1_reference(load_state(folder), e, g)
    assert (got - want).abs().max() <= TOL
    lm_head = TARGET.get_output_embeddings()
    assert (head.logits(got, lm_head) - lm_head(want)).abs().max() <= TOL


def test_eagle1_llama3_variant_and_a_bias_the_config_denies(tmp_path):
    """E2: no fc bias, rope_theta 500000, model.safetensors; a file whose fc.bias contradicts its config."""
    folder = eagle1_folder(tmp_path / "l3", TARGET, bias=False, config_bias=False, rope_theta=500000.0,
                           weights="model.safetensors")
    head = load_head(folder, "float64")
    assert not head.config.fc_bias and head.config.rope_theta == 500000.0
    e, g = TARGET.get_input_embeddings()(TOKENS[:, 1:]), states(TARGET, TOKENS)[-1][:, :-1]
    with torch.no_grad():
        assert (head(e, g, torch.arange(5)[None])
                - eagle1_reference(load_state(folder), e, g, theta=500000.0)).abs().max() <= TOL
    contradicting = eagle1_folder(tmp_path / "c", TARGET, bias=True, config_bias=False)
    with pytest.warns(UserWarning, match="config says fc bias False but the weights have fc.bias; the weights decide"):
        assert load_head(contradicting).config.fc_bias


def test_an_embedding_that_is_not_the_targets_is_refused(tmp_path):
    """E3: the file's embed_tokens copy must be the target's: never used silently."""
    other = torch.randn(64, 32, dtype=torch.float64)
    head = load_head(eagle1_folder(tmp_path, TARGET, embedding=other))
    with pytest.raises(ValueError, match="embed_tokens is not this target's embedding"):
        generate(HFTarget(TARGET), EagleProposer(head, CHOICES), TOKENS, 4)
    same = load_head(eagle1_folder(tmp_path / "same", TARGET, embedding=TARGET.get_input_embeddings().weight.float()))
    generate(HFTarget(TARGET), EagleProposer(same, CHOICES), TOKENS, 4)  # fp32 copy of the fp64 target: accepted


def fused_reference(kind, state, hidden, layers):
    if kind == "eagle":
        return hidden[-1]
    return torch.cat([hidden[i] for i in layers], -1) @ state["fc.weight"].T


def head_output_reference(kind, state, target, sequence, layers):
    """The reference head's output at the last position of a committed sequence [1, T]."""
    hidden = states(target, sequence)
    e = target.get_input_embeddings()(sequence[:, 1:])
    g = fused_reference(kind, state, hidden, layers)[:, :-1]
    return (eagle1_reference(state, e, g) if kind == "eagle" else eagle3_reference(state, e, g)[0])[0, -1]


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_decoding_reads_the_targets_features_as_published(tmp_path, kind):
    """E4 / E9: at every step the loaded head's root output equals the reference forward over the whole
    committed sequence, B = 2 rows accepting different counts; greedy equals plain greedy."""
    folder = eagle1_folder(tmp_path, SMALL) if kind == "eagle" else eagle3_folder(tmp_path, vocab=8, draft_vocab=6)
    head, state = load_head(folder, "float64"), load_state(folder)
    proposer = Recording(head, None, top_k=3, depth=3, budget=7)
    prompts = torch.tensor([[4, 1, 2], [1, 1, 5]])
    decoder = Decoder(HFTarget(SMALL), proposer, SamplingConfig(), TorchSource(seed=0))
    decoder.prefill(prompts)
    for _ in range(8):
        decoder.step()
    accepted = torch.stack([r.num_accepted for r in proposer.results])
    assert bool((accepted[:, 0] != accepted[:, 1]).any())
    layers = proposer.hidden_layers
    for b in range(2):
        seq = prompts[b].tolist()
        for step, (roots, got) in enumerate(proposer.roots):
            want = head_output_reference(kind, state, SMALL, torch.tensor([seq + [int(roots[b])]]), layers)
            assert (got[b] - want).abs().max() <= TOL, (b, step)
            if step < len(proposer.results):
                r = proposer.results[step]
                seq += [int(roots[b])] + r.tokens[b, : int(r.num_accepted[b])].tolist()
    for make in (lambda: EagleProposer(head, CHOICES), lambda: EagleProposer(head, None, top_k=3, depth=3, budget=7)):
        report = greedy_identity(SMALL, make, torch.tensor([[4, 7, 2], [7, 1, 1]]), 20)
        assert report.equal, (kind, report.first_difference)


def test_eagle3_matches_the_published_forward_and_chain(tmp_path):
    """E5: g0 = fc([hs2 ; hs4 ; hs5]) (L = 8), pre-norm h and draft logits at every position; a 3-step
    chain feeding h back with fc skipped; RoPE base 10000 (no rope_theta in the config)."""
    folder = eagle3_folder(tmp_path)
    head, s = load_head(folder, "float64"), load_state(folder)
    assert isinstance(head, Eagle3Head) and head.config.rope_theta == 10000.0
    hs = states(TARGET, TOKENS)
    embed = TARGET.get_input_embeddings()
    e, g = embed(TOKENS[:, 1:]), torch.cat([hs[2], hs[4], hs[5]], -1)[:, :-1] @ s["fc.weight"].T
    with torch.no_grad():
        got = head(e, head.fused(torch.stack([hs[2], hs[4], hs[5]], 2)[:, :-1]), torch.arange(5)[None])
    want_h, want_logits = eagle3_reference(s, e, g)
    assert (got - want_h).abs().max() <= TOL
    assert (head.draft_logits(got) - want_logits).abs().max() <= TOL
    # the chain from the last position: step j reads a token and the previous step's h, fc skipped
    from transformers import DynamicCache

    cache, chain_tokens, features, rows = DynamicCache(), [40, 3, 17], [g], [e]
    with torch.no_grad():
        h = head(e, g, torch.arange(5)[None], cache)
        for j, token in enumerate(chain_tokens):
            rows.append(embed(torch.tensor([[token]])))
            features.append(h[:, -1:])
            h = head(rows[-1], h[:, -1:], torch.tensor([[5 + j]]), cache)
            ref_h, _ = eagle3_reference(s, torch.cat(rows, 1), torch.cat(features, 1))
            assert (h[0, -1] - ref_h[0, -1]).abs().max() <= TOL, j


def test_eagle3_vocabulary_maps(tmp_path):
    """E6: full-vocabulary logits are the draft's at d + d2t[d] and -inf where t2d is False; bad maps refused."""
    head = load_head(eagle3_folder(tmp_path, draft_vocab=16), "float64")
    h = torch.randn(3, 32, dtype=torch.float64)
    draft, full = head.draft_logits(h), head.logits(h)
    ids = torch.arange(16) + head.d2t
    assert torch.equal(full[:, ids], draft)
    assert bool(torch.isneginf(full[:, ~head.t2d]).all()) and int(head.t2d.sum()) == 16
    for name, change in [("not increasing", lambda s: s["d2t"].__setitem__(1, -1)),
                         ("outside the target's vocabulary", lambda s: s["d2t"].__setitem__(15, 64)),
                         ("t2d marks", lambda s: s["t2d"].__setitem__(int((~s["t2d"]).nonzero()[0]), True))]:
        from safetensors.torch import load_file, save_file

        bad = eagle3_folder(tmp_path / name.replace(" ", "_").replace("'", ""), draft_vocab=16)
        state = load_file(str(bad / "model.safetensors"))
        change(state)
        save_file(state, str(bad / "model.safetensors"))
        with pytest.raises(ValueError, match=name.split()[0]):
            load_head(bad)


def test_eagle3_layer_ids_by_convention(tmp_path):
    """E7: no ids -> (2, L//2, L-3); SGLang/SpecForge ids [1, 3, 4] -> (2, 4, 5); the same ids as vLLM's ->
    (1, 3, 4)."""
    def layers(head):
        proposer = EagleProposer(head, CHOICES)
        proposer.prefill(TOKENS, HFTarget(TARGET))
        return proposer.hidden_layers

    assert layers(load_head(eagle3_folder(tmp_path / "none"))) == (2, 4, 5)
    with_ids = eagle3_folder(tmp_path / "ids", ids=[1, 3, 4])
    assert layers(load_head(with_ids)) == (2, 4, 5)
    assert layers(load_head(with_ids, layer_ids="vllm")) == (1, 3, 4)


def test_eagle3_variants(tmp_path):
    """E8: a full draft vocabulary without maps; a draft narrower than its target with its own embedding;
    options we do not implement refused by name."""
    full = load_head(eagle3_folder(tmp_path / "full", draft_vocab=64, maps=False), "float64")
    assert full.draft_ids() is None
    report = greedy_identity(TARGET, lambda: EagleProposer(full, CHOICES), TOKENS, 12)
    assert report.equal

    wide = tiny_random_model("llama", seed=4, hidden_size=48, num_layers=8, dtype="float64", init_std=0.3)
    folder = eagle3_folder(tmp_path / "wide", embed=True, target_hidden=48)
    head, s = load_head(folder, "float64"), load_state(folder)
    hs = states(wide, TOKENS)
    e = torch.nn.functional.embedding(TOKENS[:, 1:], s["embed_tokens.weight"])
    g = torch.cat([hs[2], hs[4], hs[5]], -1)[:, :-1] @ s["fc.weight"].T
    with torch.no_grad():
        got = head(head.embedding(None)(TOKENS[:, 1:]), head.fused(torch.stack([hs[2], hs[4], hs[5]], 2)[:, :-1]),
                   torch.arange(5)[None])
    assert (got - eagle3_reference(s, e, g)[0]).abs().max() <= TOL
    assert greedy_identity(wide, lambda: EagleProposer(head, CHOICES), TOKENS, 12).equal
    with pytest.raises(ValueError, match="no embed_tokens of its own"):
        load_head(eagle3_folder(tmp_path / "wide_no_embed", target_hidden=48))
    for option, match in [({"fc_norm": True}, "fc_norm"), ({"norm_before_residual": True}, "norm_before_residual"),
                          ({"num_hidden_layers": 2}, "2 draft layers")]:
        with pytest.raises(ValueError, match=match):
            load_head(eagle3_folder(tmp_path / match.replace(" ", "_"), extra_config=option))


def test_a_head_for_another_target_names_both_sizes(tmp_path):
    head = load_head(eagle3_folder(tmp_path))
    small = tiny_random_model("llama", seed=3, hidden_size=16, num_layers=8)
    with pytest.raises(ValueError, match="hidden size 32 .this target: 16."):
        generate(HFTarget(small), EagleProposer(head, CHOICES), TOKENS, 4)
    with pytest.raises(FileNotFoundError, match="looked for eagle_config.json, medusa_config.json, config.json"):
        load_head(tmp_path / "absent")


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_the_exact_law_holds_with_a_loaded_head(tmp_path, kind):
    """E4 / E9: the real loop's law of the first tokens, enumerated over every coin, is the target's."""
    toy = tiny_random_model("llama", seed=5, vocab_size=4, num_layers=8, dtype="float64", init_std=0.5)
    folder = eagle1_folder(tmp_path, toy) if kind == "eagle" else eagle3_folder(tmp_path, vocab=4, draft_vocab=3)
    head = load_head(folder, "float64")
    prompt, sampling = torch.tensor([[1, 2, 0]]), SamplingConfig()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = exact_loop_law(toy, lambda: EagleProposer(head, [(0,), (1,), (0, 0)]), prompt, 2, sampling)
    assert compare(spec, teacher_forced_law(toy, prompt, 2, sampling)).tv < 1e-12
