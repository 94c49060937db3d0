"""Which grammar engine: the cost per tree node of the installed engines, side by side, on the zoo's tokenizer.

    pip install -e '.[grammar-bench]'      # llguidance and outlines-core beside xgrammar
    python -m experiments.bench_grammar

A node costs one token accepted and one mask filled (what framework/constraints/grammar.py does per tree row);
a chain of `nodes` tokens of a valid JSON document for a small schema is walked and rolled back, `repeats`
times, each engine in turn in the same run. Engines not installed are left out (and said so).
"""

from __future__ import annotations

import json
import time

import hydra
import torch
from omegaconf import DictConfig

from framework.zoo.checkpoints import find_folder
from framework.zoo.tokenizer import load_tokenizer

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "size": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "size", "tags"]}
DOCUMENT = {"name": "open_file for reading", "size": 1234, "tags": ["io", "os.path", "shutil"]}


def xgrammar_walk(tokenizer, vocab: int, ids: list[int]):
    import xgrammar

    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab)
    matcher = xgrammar.GrammarMatcher(xgrammar.GrammarCompiler(info).compile_json_schema(json.dumps(SCHEMA)))
    bitmask = xgrammar.allocate_token_bitmask(1, vocab)

    def walk():
        matcher.fill_next_token_bitmask(bitmask, 0)
        for token in ids:
            matcher.accept_token(token)
            matcher.fill_next_token_bitmask(bitmask, 0)
        matcher.rollback(len(ids))
    return walk


def llguidance_walk(tokenizer, vocab: int, ids: list[int]):
    import llguidance
    import llguidance.hf
    import llguidance.torch

    matcher = llguidance.LLMatcher(llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab),
                                   llguidance.LLMatcher.grammar_from_json_schema(json.dumps(SCHEMA)))
    bitmask = llguidance.torch.allocate_token_bitmask(1, vocab)

    def walk():
        llguidance.torch.fill_next_token_bitmask(matcher, bitmask, 0)
        for token in ids:
            matcher.consume_token(token)
            llguidance.torch.fill_next_token_bitmask(matcher, bitmask, 0)
        matcher.rollback(len(ids))
    return walk


def outlines_core_walk(tokenizer, vocab: int, ids: list[int]):
    import outlines_core
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_of = {char: byte for byte, char in bytes_to_unicode().items()}  # byte-level BPE spells bytes as characters
    tokens: dict[bytes, list[int]] = {}
    for text, token in tokenizer.get_vocab().items():
        if token != tokenizer.eos_token_id:
            tokens.setdefault(bytes(byte_of[c] for c in text), []).append(token)
    regex = outlines_core.json_schema.build_regex_from_schema(json.dumps(SCHEMA))
    guide = outlines_core.Guide(outlines_core.Index(regex, outlines_core.Vocabulary(tokenizer.eos_token_id, tokens)))
    mask = torch.zeros((vocab + 31) // 32, dtype=torch.int32)

    def walk():
        guide.write_mask_into(mask.data_ptr(), mask.numel(), mask.element_size())
        for token in ids:
            guide.advance(token, return_tokens=False)
            guide.write_mask_into(mask.data_ptr(), mask.numel(), mask.element_size())
        guide.rollback_state(len(ids))
    return walk


ENGINES = {"xgrammar": xgrammar_walk, "llguidance": llguidance_walk, "outlines-core": outlines_core_walk}


@hydra.main(config_path="../conf", config_name="bench_grammar", version_base="1.3")
def main(args: DictConfig) -> None:
    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer(find_folder("target", "tokenizer.json"))
    ids = tokenizer.encode(json.dumps(DOCUMENT))[: args.nodes]
    print(f"| engine | per node (us) | walk of {len(ids)} nodes (ms) |\n|---|---:|---:|")
    for name, build in ENGINES.items():
        try:
            walk = build(tokenizer, len(tokenizer), ids)
        except ImportError:
            print(f"| {name} | not installed | |")
            continue
        walk()  # warm
        start = time.perf_counter()
        for _ in range(args.repeats):
            walk()
        per_walk = (time.perf_counter() - start) / args.repeats
        print(f"| {name} | {1e6 * per_walk / (len(ids) + 1):.1f} | {1e3 * per_walk:.3f} |")


if __name__ == "__main__":
    main()
