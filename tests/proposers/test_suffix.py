"""SuffixDecoding: the trie's counts are substring counts, eviction keeps the cache bounded and exact, the tree is
the best paths by probability, greedy identity through the shared verifier, later requests drafting from earlier
ones, bad settings named."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from engine.loop import DecodeOptions, generate
from framework.core.policy import AtDepth
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.real import greedy_identity
from proposers import SuffixCache, SuffixProposer
from proposers.suffix.trie import SuffixTrie


def counts_of(trie: SuffixTrie) -> Counter:
    """Every path of the trie with its count."""
    found, stack = Counter(), [((), trie.root)]
    while stack:
        path, node = stack.pop()
        for token, child in trie.children(node).items():
            found[path + (token,)] = trie.count(child)
            stack.append((path + (token,), child))
    return found


def substrings(sequences, max_depth: int) -> Counter:
    """The brute-force count of every substring of at most max_depth tokens."""
    return Counter(tuple(s[i:j]) for s in sequences for i in range(len(s))
                   for j in range(i + 1, min(i + max_depth, len(s)) + 1))


def test_the_trie_counts_every_substring_up_to_its_depth_and_removal_undoes_it():
    rng = random.Random(0)
    sequences = [[rng.randrange(4) for _ in range(rng.randrange(1, 30))] for _ in range(5)]
    trie = SuffixTrie(max_depth=5)
    for seq in sequences:
        open_nodes = trie.open()
        for at in range(0, len(seq), 7):  # added in chunks, as tokens commit
            open_nodes = trie.extend(open_nodes, seq[at:at + 7])
    assert counts_of(trie) == substrings(sequences, 5)
    trie.extend(trie.open(), sequences[0], sign=-1)
    assert counts_of(trie) == substrings(sequences[1:], 5)
    held = trie.nodes
    for seq in sequences[1:]:
        trie.extend(trie.open(), seq, sign=-1)
    assert counts_of(trie) == Counter() and trie.nodes == 1  # every node freed, the root left
    for seq in sequences[1:]:
        trie.extend(trie.open(), seq)
    assert counts_of(trie) == substrings(sequences[1:], 5) and trie.nodes == held


def test_the_cache_stays_within_its_bound_evicting_the_oldest():
    cache = SuffixCache(max_tokens=25, max_depth=4)
    kept = []
    for i in range(6):
        key, seq = cache.open(), [i % 3, 1, 2, 3, i] * 2  # 10 tokens each
        cache.extend(key, seq[:4])
        cache.extend(key, seq[4:])
        kept = (kept + [seq])[-2:]
        assert cache.tokens <= 25
    assert cache.evicted == 4 and counts_of(cache.trie) == substrings(kept, 4)
    alone = SuffixCache(max_tokens=5, max_depth=4)
    key = alone.open()
    alone.extend(key, list(range(9)))  # one sequence past the bound stops growing there
    assert alone.tokens == 5 and counts_of(alone.trie) == substrings([list(range(5))], 4)


def test_the_tree_is_the_most_probable_paths_and_respects_budget_and_floor():
    trie = SuffixTrie(max_depth=4)
    # after 9: 1 (3 of 4), 5 (1 of 4); after 9 1: 2 (2/3), 3 (1/3)
    trie.extend(trie.open(), [9, 1, 2, 9, 1, 2, 9, 1, 3, 9, 5])
    node, length = trie.match([7, 9], max_match=3)
    assert length == 1
    leaves, expected = trie.speculate(node, budget=3, min_prob=0.0)
    assert leaves == [([1, 2, 9], 0.5)]  # best first: [1] 0.75, [1, 2] 0.5, [1, 2, 9] 0.5 (9 always follows 9 1 2)
    assert expected == pytest.approx(0.75 + 0.5 + 0.5)
    leaves, expected = trie.speculate(node, budget=5, min_prob=0.0)  # then [5] and [1, 3], 0.25 each
    assert sorted(leaves) == [([1, 2, 9], 0.5), ([1, 3], 0.25), ([5], 0.25)] and expected == pytest.approx(2.25)
    leaves, _ = trie.speculate(node, budget=8, min_prob=0.4)  # the floor: 0.75 and 0.5 pass, then 0.5 * 1 ([1, 2, 9])
    assert leaves == [([1, 2, 9], 0.5)]
    node, length = trie.match([7, 9, 1], max_match=3)  # the longest suffix held: 9 1
    assert length == 2 and set(trie.children(node)) == {2, 3}
    assert trie.match([3, 9, 5], max_match=3) == (None, 0)  # held, but only at the end: nothing follows it


@pytest.mark.parametrize("with_cache", [False, True])
def test_greedy_identity(with_cache):
    target = tiny_random_model("llama", seed=3, vocab_size=8, dtype="float64", init_std=0.3)
    cache = SuffixCache(max_tokens=500) if with_cache else None
    for prompt in ([4, 1, 2, 4, 1, 2, 4, 1], [7, 7, 3, 1]):
        report = greedy_identity(target, lambda: SuffixProposer(cache), torch.tensor([prompt]), 30)
        assert report.equal, report.first_difference


def test_a_later_request_drafts_from_an_earlier_ones_output():
    """The same prompt twice: the second request's first steps find the first's output in the global cache."""
    target = tiny_random_model("llama", seed=5, vocab_size=64, init_std=0.3)
    prompt, greedy = torch.tensor([[11, 40, 3, 27]]), SamplingConfig(temperature=0.0)
    alone = generate(HFTarget(target), SuffixProposer(None), prompt, 24, greedy).stats.summary()["tokens_per_forward"]
    cache = SuffixCache()
    generate(HFTarget(target), SuffixProposer(cache), prompt, 24, greedy)
    again = generate(HFTarget(target), SuffixProposer(cache), prompt, 24, greedy).stats.summary()["tokens_per_forward"]
    assert cache.tokens > 0 and again > alone + 1


@pytest.mark.parametrize("settings, message", [
    (dict(max_match=32, max_depth=32), r"max_match must lie in 1..max_depth-1 \(31\), got 32"),
    (dict(max_spec_factor=0), "max_spec_factor must be > 0"),
    (dict(min_prob=1.0), r"min_prob must lie in \[0, 1\), got 1.0"),
    (dict(cache="big"), "cache must be a SuffixCache or None, got str"),
])
def test_bad_settings_are_named(settings, message):
    with pytest.raises(ValueError, match=message):
        SuffixProposer(**settings)
    with pytest.raises(ValueError, match="max_tokens must be >= 1, got 0"):
        SuffixCache(max_tokens=0)


def test_inside_a_mix_beside_prompt_lookup():
    from proposers import MixProposer, PromptLookupProposer

    target = tiny_random_model("llama", seed=3, vocab_size=8, dtype="float64", init_std=0.3)
    cache = SuffixCache()
    make = lambda: MixProposer([SuffixProposer(cache), PromptLookupProposer(max_ngram=2, min_ngram=1)], budget=16)  # noqa: E731
    for prompt in ([4, 1, 2, 4, 1, 2, 4, 1], [4, 1, 2, 4, 1, 2, 4, 1]):  # the second also drafts from the cache
        report = greedy_identity(target, make, torch.tensor([prompt]), 30)
        assert report.equal, report.first_difference


def test_a_cache_file_is_kept_read_back_and_refused_for_another_tokenizer(tmp_path):
    path = tmp_path / "suffix_cache.pt"
    target = tiny_random_model("llama", seed=5, vocab_size=64, init_std=0.3)
    cache = SuffixCache(max_depth=8, path=path)
    greedy = SamplingConfig(temperature=0.0)
    for prompt in ([11, 40, 3, 27], [9, 9, 2]):
        generate(HFTarget(target), SuffixProposer(cache), torch.tensor([prompt]), 12, greedy)
    cache.save()
    back = SuffixCache(max_depth=8, path=path)
    assert list(back.sequences.values()) == list(cache.sequences.values()) and back.tokens == cache.tokens > 0
    assert counts_of(back.trie) == counts_of(cache.trie)
    other = tiny_random_model("llama", seed=5, vocab_size=32, init_std=0.3)
    with pytest.raises(ValueError, match=r"suffix cache in .*suffix_cache.pt holds token ids of another tokenizer "
                                         r"\(vocabulary:64\) than this target's \(vocabulary:32\)"):
        generate(HFTarget(other), SuffixProposer(back), torch.tensor([[1, 2]]), 4, greedy)
    path.write_bytes(b"not a cache")
    with pytest.raises(ValueError, match="suffix_cache.pt is not a suffix cache"):
        SuffixCache(path=path)


def test_a_renewed_cache_holds_what_its_file_held_and_writes_nothing(tmp_path):
    """renewed (framework.core.proposer.SharedStore): the bounds kept, this process's requests gone, the file's
    sequences back; the original is untouched and the copy never writes the file."""
    path = tmp_path / "suffix_cache.pt"
    target = tiny_random_model("llama", seed=5, vocab_size=64, init_std=0.3)
    greedy = SamplingConfig(temperature=0.0)
    first = SuffixCache(max_tokens=500, max_depth=8, path=path)
    generate(HFTarget(target), SuffixProposer(first), torch.tensor([[11, 40, 3, 27]]), 12, greedy)
    first.save()
    cache = SuffixCache(max_tokens=500, max_depth=8, path=path)
    generate(HFTarget(target), SuffixProposer(cache), torch.tensor([[9, 9, 2]]), 12, greedy)
    fresh = cache.renewed()
    assert (fresh.max_tokens, fresh.trie.max_depth, fresh.path) == (500, 8, None)
    assert list(fresh.sequences.values()) == list(first.sequences.values()) and fresh.tokens < cache.tokens
    assert counts_of(fresh.trie) == counts_of(first.trie)
    assert SuffixCache().renewed().tokens == 0
    written = path.read_bytes()
    generate(HFTarget(target), SuffixProposer(fresh), torch.tensor([[5, 6, 7]]), 12, greedy)
    generate(HFTarget(target), SuffixProposer(fresh), torch.tensor([[5, 6, 7]]), 12, greedy)
    assert path.read_bytes() == written and fresh.tokens > 0


def test_a_request_decoded_plain_still_teaches_the_cache():
    """A policy that keeps every step plain (goodput while nothing pays): the request's output still reaches the
    global cache, so a later request drafts from it (fed only while drafting, it stayed empty)."""
    target = tiny_random_model("llama", seed=5, vocab_size=64, init_std=0.3)
    prompt, greedy = torch.tensor([[11, 40, 3, 27]]), SamplingConfig(temperature=0.0)
    cache = SuffixCache()
    plain = generate(HFTarget(target), SuffixProposer(cache), prompt, 24, greedy,
                     options=DecodeOptions(policy=AtDepth(0)))
    assert cache.tokens >= 20
    again = generate(HFTarget(target), SuffixProposer(cache), prompt, 24, greedy).stats.summary()["tokens_per_forward"]
    assert again > 2 and plain.tokens.shape == (1, 24)
