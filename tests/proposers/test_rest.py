"""REST: suffix array and matches against brute force, the tree it proposes, the cached datastore
(reuse, another tokenizer refused, sources), bad input, and losslessness (greedy identity, exact law)."""

from collections import Counter

import datasets
import numpy as np
import pytest
import torch
import transformers

from engine.loop import generate
from framework.core.path_tree import node_paths
from framework.core.proposer import DecodeState
from framework.core.randomness import TorchSource
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from framework.zoo.tokenizer import train_tokenizer
from harness.exact import compare
from harness.real import exact_loop_law, greedy_identity, teacher_forced_law
from proposers import RestProposer
from proposers.rest import datastore as rest_datastore
from proposers.rest.datastore import SEPARATOR, Datastore, DatastoreSource, build_datastore
from proposers.rest.suffix_array import match_range, suffix_array

TEXTS = ["def add(a, b):\n    return a + b\n", "def sub(a, b):\n    return a - b\n", "x = add(1, 2)\ny = sub(3, 4)\n"]


def brute_matches(docs, pattern):
    """Every (document, start) where the pattern occurs."""
    m = len(pattern)
    return [(d, s) for d, doc in enumerate(docs) for s in range(len(doc) - m + 1)
            if list(doc[s : s + m]) == list(pattern)]


def brute_continuations(docs, context, depth, max_len, min_len):
    for m in range(min(max_len, len(context)), min_len - 1, -1):
        hits = brute_matches(docs, context[len(context) - m :])
        if hits:
            return m, Counter(tuple(docs[d][s + m : s + m + depth]) for d, s in hits if s + m < len(docs[d]))
    return None, Counter()


def state_for(root):
    root = torch.tensor(root)
    return DecodeState(root, torch.zeros(len(root), 64, dtype=torch.bool), SamplingConfig(), TorchSource(0))


def prefilled(store, prompt, vocab_size=64, **settings):
    proposer = RestProposer(store, **settings)
    proposer.prefill(torch.tensor(prompt), HFTarget(tiny_random_model(vocab_size=vocab_size)))
    return proposer


# --- suffix array and matching ------------------------------------------------------------------


def test_suffix_array_is_the_sorted_suffixes():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 40, 300):
        for vocab in (1, 2, 5, 50):
            tokens = rng.integers(-1, vocab, n)
            expected = sorted(range(n), key=lambda i: tokens[i:].tolist())  # a prefix sorts first
            assert suffix_array(tokens).tolist() == expected, (n, vocab)
    assert suffix_array(np.zeros(0, dtype=np.int64)).tolist() == []


def test_match_range_counts_every_occurrence():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 3, 400)
    sa = suffix_array(tokens)
    for m in (1, 2, 3, 5, 8):
        for _ in range(10):
            pattern = rng.integers(0, 3, m).tolist()
            lo, hi = match_range(tokens, sa, pattern)
            starts = sorted(int(s) for s in sa[lo:hi])
            assert starts == [s for s in range(len(tokens) - m + 1) if tokens[s : s + m].tolist() == pattern]


@pytest.mark.parametrize("wide", [False, True])
def test_longest_match_and_continuations_vs_brute_force(wide):
    rng = np.random.default_rng(2)
    docs = [rng.integers(0, 4, int(rng.integers(1, 60))).tolist() for _ in range(12)]
    docs += [[70_000]] if wide else []  # a large id: 3 tokens per packed key, longer matches bisect within a bucket
    store = Datastore.from_token_ids(docs)
    for _ in range(200):
        context = rng.integers(0, 4, int(rng.integers(1, 20))).tolist()
        max_len, min_len, depth = int(rng.integers(3, 17)), int(rng.integers(1, 3)), int(rng.integers(1, 6))
        length, expected = brute_continuations(docs, context, depth, max_len, min_len)
        match = store.longest_match(context, max_len, min_len)
        assert (match and match.length) == length
        if match is not None:
            assert match.hi - match.lo == len(brute_matches(docs, context[len(context) - length :]))
        assert (store.continuations(context, depth, 10**6, max_len, min_len)
                == expected), (context, max_len, min_len)


def test_a_batch_of_contexts_equals_each_context_alone():
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 4, int(rng.integers(1, 60))).tolist() for _ in range(12)]
    store = Datastore.from_token_ids(docs)
    contexts = [rng.integers(0, 4, int(rng.integers(1, 20))).tolist() for _ in range(64)]
    tokens = torch.full((64, 20), 3, dtype=torch.long)  # past each row's length: noise, never read
    for b, context in enumerate(contexts):
        tokens[b, : len(context)] = torch.tensor(context)
    lengths = torch.tensor([len(c) for c in contexts])
    for max_matches in (10**6, 5):  # every occurrence (the brute force's counts), and a capped read
        found = store.batched_continuations(tokens, lengths, 3, max_matches, 6, 2)
        for b, context in enumerate(contexts):
            got = Counter(tuple(t for t in path if t >= 0)
                          for path, w in zip(found.tokens[b].tolist(), found.weights[b].tolist()) if w)
            assert got == store.continuations(context, 3, max_matches, 6, 2)
            assert max_matches < 10**6 or got == brute_continuations(docs, context, 3, 6, 2)[1]


def test_no_match_crosses_a_document():
    store = Datastore.from_token_ids([[1, 2], [3, 4]])
    assert store.longest_match([2, 3]).length == 1  # "2 3" straddles the documents: only "3" matches
    assert store.continuations([1, 2], 4) == Counter()  # "1 2" ends its document: nothing follows
    assert store.continuations([1], 4) == Counter({(2,): 1})
    assert store.tokens.tolist() == [1, 2, SEPARATOR, 3, 4, SEPARATOR]


def test_max_matches_reads_evenly_spaced_occurrences():
    """A capped read is deterministic and keeps the continuations' proportions."""
    docs = [[5, 1]] * 300 + [[5, 2]] * 100
    store = Datastore.from_token_ids(docs)
    counts = store.continuations([5], 1, max_matches=40)
    assert counts == Counter({(1,): 30, (2,): 10}) == store.continuations([5], 1, max_matches=40)


# --- the proposer -------------------------------------------------------------------------------


def test_tree_holds_the_most_frequent_continuations():
    docs = [[9, 4, 5, 6, 7]] * 3 + [[9, 4, 5, 8]] * 2 + [[4, 5, 1, 2]]  # after "4 5": 6 7 (x3), 8 (x2), 1 2
    proposer = prefilled(Datastore.from_token_ids(docs), [[30, 9, 4]], budget=3, depth=2)
    tree = proposer.propose(state_for([5]))
    assert tree.kind == "point" and tree.draft_probs is None
    assert set(node_paths(tree)[0]) == {(6,), (6, 7), (8,)}  # longest match "9 4 5": 6 7 x3, 8 x2
    assert tree.tokens[0, 0] == 6  # children ranked by count
    wide = prefilled(Datastore.from_token_ids(docs), [[30, 2, 4]], budget=10, depth=2).propose(state_for([5]))
    assert set(node_paths(wide)[0]) == {(6,), (6, 7), (8,), (1,), (1, 2)}  # only "4 5" matches: all 6 rows


def test_rows_have_their_own_matches():
    docs = [[1, 2, 3, 4], [7, 8, 9, 10]]
    proposer = prefilled(Datastore.from_token_ids(docs), [[5, 1]], depth=2)
    proposer.select(torch.zeros(2, dtype=torch.long))
    proposer.history.tokens[1, :2] = torch.tensor([5, 7])  # the second row went another way
    paths = node_paths(proposer.propose(state_for([2, 8])))
    assert {(3,), (3, 4)} <= set(paths[0]) and {(9,), (9, 10)} <= set(paths[1])


def test_short_context_or_no_match_is_a_plain_step():
    store = Datastore.from_token_ids([[1, 2, 3, 4]])
    assert prefilled(store, [[9]], min_context=3).propose(state_for([1])).num_nodes == 0  # context of 2 < 3
    assert prefilled(store, [[9]]).propose(state_for([50])).num_nodes == 0  # 50 never occurs
    assert prefilled(store, [[9]]).propose(state_for([4])).num_nodes == 0  # 4 ends the corpus


def test_commit_extends_the_context():
    store = Datastore.from_token_ids([[1, 2, 3, 4, 5]])
    out = generate(HFTarget(tiny_random_model(seed=4)), RestProposer(store), torch.tensor([[1, 2]]), 6,
                   SamplingConfig(temperature=0))
    assert out.tokens.shape == (1, 6)


@pytest.mark.parametrize("setting, value", [("budget", 0), ("depth", 0), ("max_matches", 0), ("min_context", 0),
                                            ("max_context", 0)])
def test_bad_settings_name_themselves(setting, value):
    with pytest.raises(ValueError, match=setting):
        RestProposer(Datastore.from_token_ids([[1, 2]]), **{setting: value})


def test_bad_datastores():
    with pytest.raises(ValueError, match="datastore must be"):
        RestProposer([[1, 2, 3]])
    with pytest.raises(ValueError, match="'my ids'"):
        Datastore.from_token_ids([[], []], source="my ids")
    with pytest.raises(ValueError, match="negative"):
        Datastore.from_token_ids([[1, -2]])
    with pytest.raises(ValueError, match="vocab_size 4"):
        Datastore.from_token_ids([[1, 7]], vocab_size=4)
    with pytest.raises(ValueError, match="vocabulary of 100 tokens"):
        prefilled(Datastore.from_token_ids([[1, 99]]), [[1]])  # the target has 64
    with pytest.raises(ValueError, match="has none"):  # text needs the target's tokenizer
        prefilled(DatastoreSource("zoo"), [[1]])


# --- the datastore built from text ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizers():
    return train_tokenizer(TEXTS * 4, vocab_size=300), train_tokenizer(["another corpus entirely"] * 8, vocab_size=270)


@pytest.fixture
def text_folder(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    for i, text in enumerate(TEXTS):
        (folder / f"{i}.py").write_text(text)
    return folder


def test_built_from_text_files(tokenizers, text_folder, tmp_path):
    tok = tokenizers[0]
    store = build_datastore(str(text_folder), tok, tmp_path / "cache")
    docs = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]  # one document per file
    assert store.tokens.tolist() == Datastore.from_token_ids(docs).tokens.tolist()
    assert store.num_tokens == sum(map(len, docs)) and store.vocab_size == len(tok)
    capped = build_datastore(str(text_folder), tok, tmp_path / "cache", max_tokens=5)
    assert capped.num_tokens == 5 and capped.tokens.tolist() == docs[0][:5] + [SEPARATOR]


def test_cache_is_reused_and_another_tokenizer_refused(tokenizers, text_folder, tmp_path, monkeypatch):
    builds = []
    monkeypatch.setattr(rest_datastore, "suffix_array",
                        lambda tokens, on_round=None: builds.append(1) or suffix_array(tokens))
    first = build_datastore(str(text_folder), tokenizers[0], tmp_path)
    (folder,) = [p for p in tmp_path.iterdir() if (p / "meta.json").is_file()]
    stamp = (folder / "tokens.npy").stat().st_mtime_ns
    again = build_datastore(str(text_folder), tokenizers[0], tmp_path)
    assert builds == [1] and (folder / "tokens.npy").stat().st_mtime_ns == stamp
    assert np.array_equal(again.tokens, first.tokens) and np.array_equal(again.suffix_array, first.suffix_array)
    with pytest.raises(ValueError, match="another tokenizer") as refused:
        build_datastore(str(text_folder), tokenizers[1], tmp_path)
    message = str(refused.value)
    assert str(folder) in message and "rebuild" in message
    assert first.fingerprint[:16] in message and rest_datastore.tokenizer_fingerprint(tokenizers[1])[:16] in message
    rebuilt = build_datastore(str(text_folder), tokenizers[1], tmp_path, rebuild=True)
    assert builds == [1, 1] and rebuilt.vocab_size == len(tokenizers[1])
    (text_folder / "3.py").write_text("z = 1\n")  # the source changed: the cache is stale
    build_datastore(str(text_folder), tokenizers[1], tmp_path)
    assert builds == [1, 1, 1]


def test_local_dataset_sources(tokenizers, tmp_path):
    tok = tokenizers[0]
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"code": TEXTS})}).save_to_disk(str(tmp_path / "saved"))
    saved = build_datastore(str(tmp_path / "saved"), tok, tmp_path / "cache", text_column="code")
    (tmp_path / "rows.jsonl").write_text("\n".join('{"text": %s}' % repr(t).replace("'", '"') for t in TEXTS[:2]))
    jsonl = build_datastore(str(tmp_path / "rows.jsonl"), tok, tmp_path / "cache")
    assert saved.num_tokens > jsonl.num_tokens > 0
    with pytest.raises(ValueError, match="no column 'text'"):
        build_datastore(str(tmp_path / "saved"), tok, tmp_path / "cache")
    with pytest.raises(ValueError, match="no split 'test'"):
        build_datastore(str(tmp_path / "saved"), tok, tmp_path / "cache", text_column="code", split="test")
    with pytest.raises(ValueError, match="neither 'zoo' nor"):
        build_datastore(str(tmp_path / "missing"), tok, tmp_path / "cache")


def test_empty_source_is_named(tokenizers, tmp_path):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty.txt' holds no text"):
        build_datastore(str(tmp_path / "empty.txt"), tokenizers[0], tmp_path / "cache")
    with pytest.raises(ValueError, match="max_tokens"):
        build_datastore(str(tmp_path / "empty.txt"), tokenizers[0], tmp_path / "cache", max_tokens=0)


def test_proposer_uses_the_targets_tokenizer(tokenizers, text_folder, tmp_path):
    """A DatastoreSource tokenizes with the target's own tokenizer; a datastore of another is refused."""
    tok, other = tokenizers
    model = tiny_random_model(vocab_size=len(tok), seed=5)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "model")).eval()
    source = DatastoreSource(str(text_folder), cache_dir=str(tmp_path / "cache"))
    prompt = tok(TEXTS[0][:12], return_tensors="pt", add_special_tokens=False)["input_ids"]
    RestProposer(source).prefill(prompt, HFTarget(model))
    assert source.for_model(model).index is not None  # made at the prefill: a decoding step never pays for it
    out = generate(HFTarget(model), RestProposer(source), prompt, 8, SamplingConfig(temperature=0))
    assert out.tokens.shape == (1, 8) and source.for_model(model) is next(iter(source.stores.values()))
    foreign = build_datastore(str(text_folder), other, tmp_path / "other_cache")
    with pytest.raises(ValueError, match="another tokenizer"):
        RestProposer(foreign).prefill(prompt, HFTarget(model))


# --- lossless -------------------------------------------------------------------------------------


TOY = dict(vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, dtype="float64", init_std=0.3)
TARGET = tiny_random_model("llama", seed=0, **TOY)
PROMPT = torch.tensor([[1, 2, 0]])
TOY_STORE = Datastore.from_token_ids([[1, 2, 0, 1, 1, 2, 0, 0, 2], [0, 2, 1, 2, 0, 1, 0, 0, 1, 2, 2]])
SAMPLINGS = {"T1": SamplingConfig(), "T0.7-topk2": SamplingConfig(temperature=0.7, top_k=2),
             "penalty1.5": SamplingConfig(repetition_penalty=1.5)}


def own_continuations(model, prompts, length):
    """Documents the target would write itself (greedy), so that REST's candidates get accepted."""
    return [generate(HFTarget(model), None, torch.tensor([p]), length, SamplingConfig(temperature=0)).tokens[0].tolist()
            for p in prompts]


def test_greedy_identity_and_acceptance():
    target = tiny_random_model("llama", seed=3, dtype="float64", init_std=0.3)
    rng = np.random.default_rng(3)
    docs = own_continuations(target, [[4, 9, 2], [5, 5]], 40) + rng.integers(0, 64, (4, 30)).tolist()
    store = Datastore.from_token_ids(docs)
    for settings in (dict(), dict(budget=4, depth=3, min_context=2)):
        report = greedy_identity(target, lambda: RestProposer(store, **settings), torch.tensor([[4, 9, 2]]), 32)
        assert report.equal, (settings, report.first_difference)
    out = generate(HFTarget(target), RestProposer(store), torch.tensor([[4, 9, 2]]), 32, SamplingConfig(temperature=0))
    assert out.stats.summary()["tokens_per_forward"] > 2  # it copies its own text


@pytest.mark.parametrize("sname", ["T1", "T0.7-topk2"])
def test_exact_law_through_the_real_loop(sname):
    law = exact_loop_law(TARGET, lambda: RestProposer(TOY_STORE, budget=4, depth=3), PROMPT, 3, SAMPLINGS[sname])
    result = compare(law, teacher_forced_law(TARGET, PROMPT, 3, SAMPLINGS[sname]))
    assert result.passes(1e-9), (sname, result.tv)


def test_toy_trees_are_not_empty():
    """The exact cases above check real trees: the toy corpus matches the toy's text."""
    proposer = prefilled(TOY_STORE, PROMPT.tolist(), vocab_size=3, budget=4, depth=3)
    assert proposer.propose(state_for([1])).num_nodes == 4


@pytest.mark.slow
def test_exact_law_with_a_penalty_and_the_config_budget():
    sampling = SAMPLINGS["penalty1.5"]
    law = exact_loop_law(TARGET, lambda: RestProposer(TOY_STORE), PROMPT, 3, sampling)
    assert compare(law, teacher_forced_law(TARGET, PROMPT, 3, sampling)).passes(1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen2", "mistral", "gpt2"])
def test_greedy_identity_other_architectures(arch):
    target = tiny_random_model(arch, seed=7, dtype="float64", init_std=0.3)
    store = Datastore.from_token_ids(own_continuations(target, [[1, 2, 3], [8, 8]], 40))
    assert greedy_identity(target, lambda: RestProposer(store), torch.tensor([[1, 2, 3]]), 32).equal


@pytest.mark.slow
def test_zoo_datastore_greedy_identity():
    """The zoo corpus datastore (built into the user's cache on first use) on the zoo target."""
    from framework.lm.text import encode_prompt, tokenizer_of
    from framework.zoo.checkpoints import load_causal_lm

    target = load_causal_lm("target")
    source = DatastoreSource("zoo")
    prompt = encode_prompt("import os\n\n\ndef read_lines(path):\n    with open(path) as f:\n", tokenizer_of(target))
    assert greedy_identity(target, lambda: RestProposer(source), prompt, 32).equal
    assert source.for_model(target).num_tokens > 10**6
