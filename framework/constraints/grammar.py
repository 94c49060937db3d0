"""Grammars (JSON schema, regex, EBNF) as a Constraint (framework/core/constraint.py), through xgrammar.

Why xgrammar: per tree node (accept the node's token, fill the mask of what may follow) on the zoo's 6144-token
vocabulary with a JSON schema, on this 2-core CPU: xgrammar 2.8 us, outlines-core 3.0 us, llguidance 6.5 us
(`python -m experiments.bench_grammar`). xgrammar is the fastest, compiles all three kinds (outlines-core has
no EBNF) and rolls back any number of tokens, which is how a tree is walked: each row's path from the
committed state, then back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Sequence

import torch
import xgrammar

from framework.core.tree_shape import TreeShape


@dataclass(frozen=True)
class Grammar:
    """Exactly one of: a JSON schema (a dict or its text), a regex, an EBNF grammar (xgrammar's GBNF dialect).
    any_whitespace: JSON may put any whitespace between its tokens (False: one fixed layout, so a model cannot
    spend its budget on blanks)."""

    json_schema: str | dict | None = None
    regex: str | None = None
    ebnf: str | None = None
    any_whitespace: bool = False

    def __post_init__(self) -> None:
        given = [name for name in ("json_schema", "regex", "ebnf") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"a grammar needs exactly one of json_schema, regex, ebnf; got {given or 'none'}")
        if self.json_schema is not None:  # read now, not after the decoding that needs it
            schema = self.json_schema
            if isinstance(schema, str):
                try:
                    schema = json.loads(schema)
                except json.JSONDecodeError as error:
                    raise ValueError(f"json_schema is text but not JSON "
                                     f"({error.msg} at column {error.colno})") from None
            if not isinstance(schema, Mapping):
                raise ValueError(f"json_schema must be a JSON object, got {type(schema).__name__}")
            schema = plain(schema)
            check_schema(schema)
            object.__setattr__(self, "json_schema", schema)

    def compile(self, info: xgrammar.TokenizerInfo) -> xgrammar.CompiledGrammar:
        compiler = xgrammar.GrammarCompiler(info)
        try:
            if self.json_schema is not None:
                schema = json.dumps(self.json_schema)
                return compiler.compile_json_schema(schema, any_whitespace=self.any_whitespace)
            if self.regex is not None:
                return compiler.compile_regex(self.regex)
            return compiler.compile_grammar(self.ebnf)
        except RuntimeError as error:  # xgrammar's parse errors
            raise ValueError(f"the grammar does not compile: {error}") from error


# The JSON-schema keywords both sides honour: the grammar engine enforces them and the validity check reads them
# (experiments/structured.py); annotations change nothing. Anything else (not, uniqueItems, multipleOf, ...) would be
# dropped by the engine and reported valid by the check, so it is refused by name.
ENFORCED = {"type", "properties", "required", "additionalProperties", "items", "maxItems", "maxLength", "minimum",
            "maximum"}
ANNOTATIONS = {"title", "description", "$schema", "examples", "default", "$comment"}
TYPES = {"object", "array", "string", "boolean", "integer"}


def plain(value):
    """A schema as plain dicts and lists (a Hydra config hands DictConfig / ListConfig)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
        return [plain(v) for v in value]
    return value


def check_schema(schema: dict, where: str = "$") -> None:
    unknown = sorted(set(schema) - ENFORCED - ANNOTATIONS)
    if unknown:
        raise ValueError(f"json_schema at {where}: {unknown} not enforced by the grammar engine (nor checked by the "
                         f"validity report): use {sorted(ENFORCED)} only")
    kind = schema.get("type")
    if kind is not None and kind not in TYPES:
        raise ValueError(f"json_schema at {where}: type {kind!r} is not one of {sorted(TYPES)}")
    for key, sub in schema.get("properties", {}).items():
        check_schema(sub, f"{where}.{key}")
    if isinstance(schema.get("items"), Mapping):
        check_schema(schema["items"], f"{where}[]")


def tokenizer_info(tokenizer, vocab_size: int, stop_token_ids: Sequence[int]) -> xgrammar.TokenizerInfo:
    """What the grammar engine needs of a vocabulary: a Hugging Face tokenizer, or the tokens' own strings in
    id order (a toy vocabulary). Ids past the tokenizer's own (a padded embedding) are never allowed."""
    if isinstance(tokenizer, (list, tuple)):
        return xgrammar.TokenizerInfo(list(tokenizer), xgrammar.VocabType.RAW, vocab_size=vocab_size,
                                      stop_token_ids=list(stop_token_ids))
    return xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                   stop_token_ids=list(stop_token_ids))


def bits_to_mask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """xgrammar's packed bitmask [R, ceil(V / 32)] int32 -> [R, V] bool (bit j of word w is token 32 w + j)."""
    shifts = torch.arange(32, dtype=torch.int32)
    return ((bitmask[..., None] >> shifts) & 1).bool().flatten(-2)[..., :vocab_size]


class GrammarConstraint:
    """One xgrammar matcher per row. allowed() walks each requested row's path from the committed state and
    rolls back, so the state only ever holds emitted tokens. A row whose grammar finished (its stop token
    emitted) allows its stop tokens only: a run that does not stop there stays in the language."""

    def __init__(self, grammar: Grammar, tokenizer, vocab_size: int, stop_token_ids: Sequence[int] = ()):
        """tokenizer: a Hugging Face tokenizer or the token strings in id order; vocab_size: the target's
        (its logits' width); stop_token_ids: what ends the text once the grammar is complete (the EOS)."""
        self.grammar, self.vocab_size = grammar, vocab_size
        self.compiled = grammar.compile(tokenizer_info(tokenizer, vocab_size, stop_token_ids))
        self.matchers: list[xgrammar.GrammarMatcher] = []
        self.stop_token_ids = list(stop_token_ids)
        stop_bits = torch.zeros((vocab_size + 31) // 32, dtype=torch.int64)  # the packed mask of the stop tokens alone
        for token in self.stop_token_ids:
            stop_bits[token // 32] |= 1 << (token % 32)
        self.stop_bits = stop_bits.to(torch.int32)  # bit 31 wraps to the sign bit, as xgrammar's int32 words hold it

    def start(self, batch_size: int) -> None:
        self.matchers = [xgrammar.GrammarMatcher(self.compiled) for _ in range(batch_size)]

    def allowed(self, tokens: torch.Tensor, shape: TreeShape, rows: torch.Tensor | None = None) -> torch.Tensor:
        rows = list(range(shape.num_nodes + 1)) if rows is None else torch.as_tensor(rows).tolist()
        if tokens.shape[0] != len(self.matchers):
            raise ValueError(f"the constraint holds {len(self.matchers)} rows but the tree has {tokens.shape[0]}")
        paths = shape.root_paths
        bitmask = xgrammar.allocate_token_bitmask(len(self.matchers) * len(rows), self.vocab_size)  # all allowed
        for b, (matcher, row_tokens) in enumerate(zip(self.matchers, tokens.tolist())):
            walked: list[int] = []  # tokens the matcher holds beyond the committed state
            for r, row in enumerate(rows):
                path = [row_tokens[i] for i in paths[row]]
                common = 0
                while common < min(len(walked), len(path)) and walked[common] == path[common]:
                    common += 1
                if len(walked) > common:
                    matcher.rollback(len(walked) - common)
                    del walked[common:]
                reachable = True
                for token in path[common:]:
                    if matcher.is_terminated():  # past the end only a stop token, which the matcher does not hold
                        reachable = token in self.stop_token_ids
                    elif matcher.accept_token(token):
                        walked.append(token)
                    else:
                        reachable = False
                    if not reachable:  # forbidden here: the row is unreachable (every token, never read)
                        break
                if reachable and matcher.is_terminated():
                    bitmask[b * len(rows) + r] = self.stop_bits
                elif reachable:
                    matcher.fill_next_token_bitmask(bitmask, b * len(rows) + r)
            if walked:
                matcher.rollback(len(walked))
        return bits_to_mask(bitmask, self.vocab_size).view(len(self.matchers), len(rows),
                                                           self.vocab_size).to(tokens.device)

    def advance(self, tokens: torch.Tensor) -> None:
        for b, (matcher, row_tokens) in enumerate(zip(self.matchers, tokens.tolist())):
            for token in row_tokens:
                if token < 0:
                    continue
                if matcher.is_terminated():  # only a stop token may follow the end (allowed() says so)
                    if token not in self.stop_token_ids:
                        raise ValueError(f"row {b} emitted token {token} after its grammar finished, "
                                         "which the grammar forbids")
                    continue
                if not matcher.accept_token(token):
                    raise ValueError(f"row {b} emitted token {token}, which the grammar forbids there")

    def select(self, rows: torch.Tensor) -> None:
        taken: set[int] = set()
        kept = []
        for row in rows.tolist():
            kept.append(self.matchers[row].fork() if row in taken else self.matchers[row])
            taken.add(row)
        self.matchers = kept

    def join(self, other: GrammarConstraint) -> None:
        if other.compiled is not self.compiled:
            raise ValueError("a batch joins newcomers under the same compiled grammar only")
        self.matchers = self.matchers + other.matchers

    def finished(self) -> list[bool]:
        """Per row: the grammar is complete and its stop token was emitted."""
        return [matcher.is_terminated() for matcher in self.matchers]
