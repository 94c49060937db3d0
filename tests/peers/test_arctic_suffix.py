"""arctic-inference's suffix cache as a row of ours (measurement/peers/arctic_suffix.py): its tree read back as
ours, the request bookkeeping checked against a stand-in worker (what it holds per request is exactly the row's
text), greedy identity through the shared verifier; the live cache where its environment is built
(`python -m experiments.peers.setup arctic`), skipped with that command elsewhere."""

from __future__ import annotations

import pytest
import torch

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from measurement.peers.arctic_suffix import ArcticSuffixProposer, leaf_paths
from measurement.peers.engine import PeerMissing, PeerWorker, peer_python

PROMPT = torch.tensor([[5, 9, 2, 31, 7, 7, 12, 40, 3, 9, 5, 9, 2, 31, 7, 7, 12, 40, 3, 9, 5, 9]])


def test_arctics_tree_becomes_its_leaf_paths():
    # 0:a -> 1:b -> 3:d ; 0:a -> 2:c ; 4:e at the top
    paths = leaf_paths([10, 11, 12, 13, 14], [-1, 0, 0, 1, -1], [0.9, 0.6, 0.3, 0.5, 0.1])
    assert sorted(paths) == sorted([([10, 11, 13], 0.5), ([10, 12], 0.3), ([14], 0.1)])
    with pytest.raises(ValueError, match="lists node 0 before its parent 2"):
        leaf_paths([1, 2], [2, -1], [0.5, 0.5])


class StandIn:
    """The worker's protocol in process: each request's text (prompt, then responses) kept and checked against the
    context each speculate sends; the draft is what followed the context's last token's previous occurrence."""

    def __init__(self):
        self.texts, self.calls = {}, []

    def ask(self, request: dict) -> dict:
        self.calls.append(request["op"])
        if request["op"] == "start":
            assert request["req"] not in self.texts
            self.texts[request["req"]] = list(request["prompt"])
            return {}
        if request["op"] == "stop":
            self.texts.pop(request["req"])
            return {}
        text = self.texts[request["req"]]
        text += request["response"]
        context = request["context"]
        assert context[:-1] == text[len(text) - len(context) + 1:], "the worker's text is not the row's"
        last = context[-1]
        earlier = [i for i in range(len(text) - 1) if text[i] == last]
        chain = text[earlier[-1] + 1: earlier[-1] + 4] if earlier else []
        return {"token_ids": chain, "parents": list(range(-1, len(chain) - 1)), "probs": [0.9] * len(chain)}


def test_the_row_hands_over_each_rows_text_once_and_decodes_plain_greedy():
    model = tiny_random_model("llama", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                              max_positions=128, seed=3, init_std=0.3)
    worker = StandIn()
    greedy = SamplingConfig(temperature=0.0)
    batch = PROMPT.repeat(2, 1)
    out = generate(HFTarget(model), ArcticSuffixProposer(worker, max_budget=8), batch, 24, greedy)
    plain = generate(HFTarget(model), None, batch, 24, greedy)
    assert torch.equal(out.tokens, plain.tokens)
    assert worker.calls.count("speculate") == 2 * len(out.stats.steps)  # each row, each step
    assert sum(int(step.drafted.sum()) for step in out.stats.steps) > 0  # its drafts reached the verifier


def test_a_missing_environment_names_the_command_that_builds_it(tmp_path):
    with pytest.raises(PeerMissing, match="python -m experiments.peers.setup arctic"):
        peer_python("arctic", str(tmp_path / "no" / "python"))


def live_worker() -> PeerWorker:
    try:
        peer_python("arctic")
    except PeerMissing as missing:
        pytest.skip(str(missing))
    worker = PeerWorker("arctic")
    worker.ask({"op": "open", "max_tree_depth": 64, "max_cached_requests": -1})
    return worker


def test_the_live_cache_drafts_from_the_prompt_and_stays_plain_greedy():
    worker = live_worker()
    try:
        model = tiny_random_model("llama", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                                  max_positions=128, seed=3, init_std=0.3)
        greedy = SamplingConfig(temperature=0.0)
        out = generate(HFTarget(model), ArcticSuffixProposer(worker, max_budget=8), PROMPT, 24, greedy)
        assert torch.equal(out.tokens, generate(HFTarget(model), None, PROMPT, 24, greedy).tokens)
        worker.ask({"op": "start", "req": "fixture", "prompt": [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 4]})
        draft = worker.ask({"op": "speculate", "req": "fixture", "response": [], "context": [1, 2, 3],
                            "max_spec_tokens": 8, "max_spec_factor": 4.0, "min_token_prob": 0.0})
        # after "1 2 3" the prompt continued with 4 twice and 5 once: both branches, 4 the likelier
        paths = dict((tuple(p), q) for p, q in leaf_paths(draft["token_ids"], draft["parents"], draft["probs"]))
        assert draft["token_ids"][0] == 4 and any(p[0] == 5 for p in paths)
    finally:
        worker.close()


def test_the_worker_keeps_caches_by_name_side_by_side(monkeypatch):
    """Each measurement cell opens a cache of its own in the one worker: a request lives in the cache it names,
    and an op naming a cache never opened is refused by that name."""
    import sys
    import types

    from measurement.peers import arctic_worker

    class Cache:
        def __init__(self, depth, requests):
            self.requests = {}

        def start_request(self, req, prompt):
            self.requests[req] = list(prompt)

        def stop_request(self, req):
            del self.requests[req]

    module = types.ModuleType("arctic_inference.suffix_decoding")
    module.SuffixDecodingCache = Cache
    monkeypatch.setitem(sys.modules, "arctic_inference", types.ModuleType("arctic_inference"))
    monkeypatch.setitem(sys.modules, "arctic_inference.suffix_decoding", module)
    monkeypatch.setattr(arctic_worker, "version", lambda name: "stand-in")
    worker = arctic_worker.Worker()
    for name in ("", "cell-a"):
        worker.open({"op": "open", "cache": name})
    worker.start({"req": "r0", "prompt": [1, 2]})
    worker.start({"cache": "cell-a", "req": "r0", "prompt": [3]})
    assert worker.caches[""].requests == {"r0": [1, 2]} and worker.caches["cell-a"].requests == {"r0": [3]}
    worker.stop({"cache": "cell-a", "req": "r0"})
    assert worker.caches[""].requests == {"r0": [1, 2]} and worker.caches["cell-a"].requests == {}
    with pytest.raises(KeyError, match="no cache named 'cell-b' is open"):
        worker.start({"cache": "cell-b", "req": "r1", "prompt": [4]})
