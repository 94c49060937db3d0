"""vLLM beside us: the worker protocol on recorded sessions (tests/peers/vllm_*.jsonl, recorded from the live worker
by `python -m tests.peers.record_session`), vLLM's recorded greedy text against our plain decoding, the missing
environment, the sampling map, our prompt lookup as vLLM's custom proposer, and the side-by-side table.
The live engine runs under `-m vllm` (test_live_vllm.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from framework.zoo.checkpoints import load_causal_lm, resolve_checkpoint
from measurement.compare_grid import grid_of
from measurement.peers.engine import PeerEngine, PeerMissing, answer_of, peer_python
from measurement.peers.report import engines_side_by_side
from measurement.peers.rows import peer_sampling
from measurement.peers.vllm_proposer import SETTINGS, PromptLookup
from tests.test_compare import load

HERE = Path(__file__).resolve().parent


def session(name: str) -> list[dict]:
    return [json.loads(line) for line in (HERE / f"vllm_{name}.jsonl").read_text().splitlines()]


def replay(name: str, speculative=None, **env) -> PeerEngine:
    """A PeerEngine whose worker answers from the recording (our interpreter, the stand-in worker script)."""
    load = session(name)[0]["request"]
    return PeerEngine("vllm", resolve_checkpoint("target"), load["max_model_len"], speculative, python=sys.executable,
                      worker=HERE / "replay_worker.py",
                      worker_env={"SPECULUM_REPLAY": str(HERE / f"vllm_{name}.jsonl"), **env})


def generations(name: str) -> list[tuple[dict, dict]]:
    return [(e["request"], e["answer"]) for e in session(name) if e["request"]["op"] == "generate"]


def test_the_protocol_carries_a_recorded_session_token_for_token():
    with replay("ngram") as engine:
        assert engine.versions["vllm"] == "0.32.0"
        for request, answer in generations("ngram"):
            out = engine.generate(request["prompts"], request["max_tokens"], request["sampling"], request["seed"])
            assert out.tokens == answer["tokens"] and out.seconds == answer["seconds"]
            assert out.counters.accepted == answer["counters"]["accepted"]


def test_a_request_the_recording_does_not_hold_comes_back_as_a_named_error():
    with replay("plain") as engine:
        request, _ = generations("plain")[0]
        with pytest.raises(RuntimeError, match="not the recorded request"):
            engine.generate(request["prompts"], request["max_tokens"] + 1, request["sampling"], request["seed"])


@pytest.mark.parametrize("broken, words", [("exit", "ended without answering 'generate'"),
                                           ("garbage", "not JSON")])
def test_a_worker_that_dies_or_writes_garbage_is_named_not_waited_for(broken, words):
    with replay("plain", SPECULUM_REPLAY_BREAK=broken) as engine:
        request, _ = generations("plain")[0]
        with pytest.raises(RuntimeError, match=words):
            engine.generate(request["prompts"], request["max_tokens"], request["sampling"], request["seed"])


def test_answers_without_ok_or_with_an_error_are_refused():
    with pytest.raises(RuntimeError, match="no 'ok' field"):
        answer_of('{"tokens": []}', "vllm")
    with pytest.raises(RuntimeError, match="ValueError: bad"):
        answer_of('{"ok": false, "error": "ValueError: bad"}', "vllm")


def test_vllms_recorded_greedy_text_is_our_plain_decoding_token_for_token():
    """The recordings are vLLM's greedy outputs on the zoo target at float32 (plain, n-gram, EAGLE-3): ours must be the
    same tokens (one plain decoding of ours per prompt and budget serves every session)."""
    target, ours = HFTarget(load_causal_lm("target")), {}
    for name in ("plain", "ngram", "eagle3"):
        for request, answer in generations(name):
            if request["sampling"]["temperature"] != 0:
                continue
            for prompt, theirs in zip(request["prompts"], answer["tokens"]):
                key = (tuple(prompt), request["max_tokens"])
                if key not in ours:
                    ours[key] = generate(target, None, torch.tensor([prompt]), request["max_tokens"],
                                         SamplingConfig(temperature=0)).tokens[0].tolist()
                assert ours[key] == theirs, f"{name}: vLLM's greedy text differs from ours"


def test_a_missing_environment_says_the_command_that_builds_it(tmp_path):
    with pytest.raises(PeerMissing, match="python -m experiments.peers.setup vllm"):
        peer_python("vllm", str(tmp_path / "absent" / "python"))
    with pytest.raises(ValueError, match="unknown peer engine"):
        peer_python("sglang")


def test_vllm_rows_are_skipped_with_the_build_line_when_the_environment_is_absent(tmp_path):
    cfg = load(tmp_path, "experiment.methods=[prompt_lookup,vllm_plain,vllm_ngram]",
               f"experiment.vllm.python={tmp_path / 'none' / 'python'}")
    made = grid_of(cfg)
    assert made.methods == ["prompt_lookup"]
    assert set(made.skipped) == {"vllm_plain", "vllm_ngram"}
    assert all("experiments.peers.setup vllm" in why for why in made.skipped.values())


def test_only_temperature_maps_to_vllms_sampling():
    assert peer_sampling(SamplingConfig(temperature=0.7)) == {"temperature": 0.7}
    for law in (SamplingConfig(top_k=20), SamplingConfig(top_p=0.9), SamplingConfig(repetition_penalty=1.2),
                SamplingConfig(logit_bias={3: 1.0})):
        with pytest.raises(ValueError, match="only temperature"):
            peer_sampling(law)


def brute_force_chain(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """The longest n-gram ending the text that occurred before, its most recent earlier occurrence, and the k
    tokens that followed it (within the text)."""
    for n in range(max_n, min_n - 1, -1):
        if len(tokens) < n + 1:
            continue
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start:start + n] == tokens[-n:]:
                return tokens[start + n:start + n + k]
    return []


def test_our_prompt_lookup_inside_vllm_drafts_the_brute_force_chain(monkeypatch):
    monkeypatch.setenv(SETTINGS, "max_ngram: 3\nmin_ngram: 2\n")
    config = SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=4),
                             model_config=SimpleNamespace(max_model_len=64))
    proposer = PromptLookup(config)
    rng = np.random.default_rng(0)
    for _ in range(50):
        texts = [rng.integers(0, 4, rng.integers(1, 40)).tolist() for _ in range(3)]
        table = np.zeros((4, 64), dtype=np.int32)  # vLLM's token_ids_cpu: [max_reqs, max_model_len]
        for i, text in enumerate(texts):
            table[i, :len(text)] = text
        counts = np.array([len(t) for t in texts] + [0])
        drafts = proposer.propose([[1], [1], [], [1]][:3] + [[]], counts, table)
        assert drafts[2] == [] and drafts[3] == []  # a request that sampled nothing this step drafts nothing
        for i in (0, 1):
            assert drafts[i] == brute_force_chain(texts[i], 2, 3, 4)


def test_a_bad_setting_of_our_proposer_inside_vllm_is_named(monkeypatch):
    monkeypatch.setenv(SETTINGS, "max_ngram: 1\nmin_ngram: 2\n")
    config = SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=4),
                             model_config=SimpleNamespace(max_model_len=64))
    with pytest.raises(ValueError, match="exceeds the n-gram max"):
        PromptLookup(config)


def row(method, tokens_per_s, speedup, length=None, identical="5/5", plain=100.0):
    return {"method": method, "sampling": "greedy", "batch": 1, "policy": "fixed", "tokens_per_s": tokens_per_s,
            "speedup": speedup, "plain_tokens_per_s": plain, "accepted_length_pooled": length,
            "greedy_identical": identical}


def test_the_side_by_side_table_sets_each_engine_against_its_own_plain():
    summary = [row("vllm_plain", 80.0, 1.25), row("vllm_ngram", 100.0, 1.0, 2.0),
               row("prompt_lookup_chain", 110.0, 1.1, 2.5)]
    text = engines_side_by_side(summary, {"matches": {"vllm_plain": "plain", "vllm_ngram": "prompt_lookup_chain"}})
    lines = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| vllm")}
    assert "| 2.00 | 2.50 | 0.800 | 100.0 | 110.0 | 1.25x | 1.10x |" in lines["vllm_ngram"]  # 100 / 80 for vLLM
    assert "| 80.0 | 100.0 | 1.00x | 1.00x |" in lines["vllm_plain"]  # ours: the baseline's own figures
    assert engines_side_by_side([row("draft", 1.0, 1.0)], {"matches": {"vllm_plain": "plain"}}) == ""


def test_a_greedy_difference_names_its_row_position_tokens_and_the_targets_logits():
    from framework.lm.models import tiny_random_model
    from measurement.compare_cells import greedy_identity, logits_of

    model = tiny_random_model("llama", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, seed=0)
    reference = tiny_random_model("llama", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                                  seed=0)
    HFTarget(model)  # the compare's model runs our attention: a plain forward through it must be the reference's
    prompt = torch.tensor([[5, 6, 7], [1, 2, 3]])
    out = greedy_identity([[9, 9], [4, 8, 7]], [[9, 9], [4, 8, 2]], prompt, logits_of(model))
    assert out["same_as_plain"] is False and out["identical_rows"] == 1
    difference = out["first_difference"]
    assert (difference["row"], difference["position"], difference["plain"], difference["method"]) == (1, 2, 2, 7)
    expected = reference(torch.tensor([[1, 2, 3, 4, 8]])).logits[0, -1]
    assert difference["logits"] == pytest.approx([float(expected[2]), float(expected[7])], abs=1e-5)
    assert "first_difference" not in greedy_identity([[1]], [[1]], prompt, logits_of(model))
