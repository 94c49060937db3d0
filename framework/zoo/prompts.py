"""Spec-Bench-style prompt sets cut from the held-out stdlib files, one split per category.

    code_continuation       a window of a file cut at a line boundary; continue it
    function_body           a `def` with its docstring; write the body
    repetition_editing      a function, a comment asking to rename one variable, the rewrite begun;
                            the answer is mostly a copy of the prompt (prompt lookup should shine)
    long_context_retrieval  functions from several files, then one of them re-opened; the answer
                            sits earlier in the context (retrieval should shine)

Deterministic: the files are sorted and the only randomness is a `random.Random` per category,
seeded from `seed`. Rows: {category, id, prompt, reference, source_path}.
"""

from __future__ import annotations

import ast
import io
import random
import re
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from functools import cache

import datasets

from framework.zoo.corpus import build_corpus, stdlib_files

CATEGORIES = ("code_continuation", "function_body", "repetition_editing", "long_context_retrieval")
MAX_CHARS = 2000  # every prompt but the long-context ones
# Long-context prompts, re-opened function included: 620-850 zoo tokens (~3.6 chars/token), so that
# the prompt, 128 new tokens and a draft tree fit the zoo's 1024 positions.
LONG_CHARS = 3000
LINE = re.compile(r"[^\n]*\n|[^\n]+$")  # "\n"-terminated lines, as ast numbers them (str.splitlines also splits on \f)


@dataclass(frozen=True)
class Prompt:
    category: str
    id: str
    prompt: str
    reference: str  # the true continuation (may be empty)
    source_path: str  # the held-out file the answer comes from


@dataclass(frozen=True)
class Source:
    path: str
    lines: list[str]  # with their line ends
    tree: ast.Module | None  # None when the file does not parse on this interpreter


def lines_of(text: str) -> list[str]:
    return LINE.findall(text)


def parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def functions(src: Source) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method, in source order (ast.walk is breadth-first, hence the sort)."""
    if src.tree is None:
        return iter(())
    found = [n for n in ast.walk(src.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return iter(sorted(found, key=lambda n: (n.lineno, n.col_offset)))


def first_line(fn: ast.AST) -> int:
    """1-based first line of a function, decorators included."""
    return min([fn.lineno, *(d.lineno for d in fn.decorator_list)])


def span(src: Source, start: int, end: int) -> str:
    """Lines start..end, 1-based and inclusive."""
    return "".join(src.lines[start - 1 : end])


def round_robin(groups: list[list[Prompt]], n: int, rng: random.Random) -> list[Prompt]:
    """Up to n prompts spread over the groups (files): shuffle each, then take one per group per round."""
    groups = [rng.sample(g, len(g)) for g in groups if g]
    chosen: list[Prompt] = []
    for i in range(max((len(g) for g in groups), default=0)):
        chosen += [g[i] for g in groups if i < len(g)]
    return chosen[:n]


# ---- code_continuation ---------------------------------------------------------------------------

def continuations(src: Source, rng: random.Random, stride: int = 150, reference_lines: int = 30) -> list[Prompt]:
    """Windows of 20-60 lines starting every `stride` lines (the first is the file's own prefix)."""
    out = []
    for start in range(0, max(len(src.lines) - 40, 0), stride):
        n = rng.randint(20, 60)
        window = src.lines[start : start + n]
        while window and len("".join(window)) > MAX_CHARS:  # long lines: cut back, still at a line end
            window.pop()
        rest = src.lines[start + len(window) : start + len(window) + reference_lines]
        if len(window) >= 10 and "".join(rest).strip():
            out.append(Prompt("code_continuation", f"code_continuation/{src.path}:{start + 1}",
                              "".join(window), "".join(rest), src.path))
    return out


# ---- function_body -------------------------------------------------------------------------------

def function_bodies(src: Source, rng: random.Random, max_body_lines: int = 60) -> list[Prompt]:
    """Decorators + signature + docstring as the prompt; the rest of the function as the reference."""
    out = []
    for fn in functions(src):
        if ast.get_docstring(fn) is None or len(fn.body) < 2:
            continue
        doc_end = fn.body[0].end_lineno
        prompt, body = span(src, first_line(fn), doc_end), span(src, doc_end + 1, fn.end_lineno)
        if len(prompt) <= MAX_CHARS and 0 < fn.end_lineno - doc_end <= max_body_lines:
            out.append(Prompt("function_body", f"function_body/{src.path}:{fn.lineno}", prompt, body, src.path))
    return out


# ---- repetition_editing --------------------------------------------------------------------------

def renameable(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Parameters and assigned locals used at least twice, never passed as a keyword (f(name=...))."""
    args = fn.args
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg not in ("self", "cls")]
    names += [n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    keywords = {k.arg for k in ast.walk(fn) if isinstance(k, ast.keyword)}
    uses = [n.id for n in ast.walk(fn) if isinstance(n, ast.Name)]
    return sorted({n for n in names if n not in keywords and uses.count(n) >= 2 and len(n) > 1})


def rename(block: str, old: str, new: str) -> str | None:
    """`block` with every identifier token `old` (not an attribute) spelled `new`; None if it won't tokenize."""
    lines = lines_of(block)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(block).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    previous = None
    hits = []
    for tok in tokens:
        if tok.type == tokenize.NAME and tok.string == old and not (previous and previous.string == "."):
            hits.append(tok.start)
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            previous = tok
    for row, col in reversed(hits):  # right to left, so earlier columns stay valid
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old) :]
    return "".join(lines)


def repetition_edits(src: Source, rng: random.Random, min_lines: int = 4, max_lines: int = 25) -> list[Prompt]:
    """Function, "# rewrite renaming a to b" comment, the rewrite's first line(s); reference: the rest."""
    out = []
    for fn in functions(src):
        start = first_line(fn)
        block = span(src, start, fn.end_lineno)
        names = renameable(fn)
        if not names or not min_lines <= fn.end_lineno - start + 1 <= max_lines:
            continue
        old = rng.choice(names)
        new = rng.choice([f"{old}_new", f"new_{old}", f"{old}2", f"the_{old}"])
        indent = re.match(r"[ \t]*", src.lines[start - 1]).group()
        rewritten = rename(block.rstrip("\n") + "\n", old, new) if new not in block else None
        if rewritten is None or rewritten == block:
            continue
        head = lines_of(rewritten)
        opened = fn.body[0].lineno - start  # decorators and the signature, however many lines
        instruction = f"\n{indent}# Rewrite the function above, renaming `{old}` to `{new}`; change nothing else.\n"
        prompt = block.rstrip("\n") + "\n" + instruction + "".join(head[:opened])
        if len(prompt) <= MAX_CHARS:
            out.append(Prompt("repetition_editing", f"repetition_editing/{src.path}:{fn.lineno}:{old}",
                              prompt, "".join(head[opened:]), src.path))
    return out


# ---- long_context_retrieval ----------------------------------------------------------------------

@dataclass(frozen=True)
class Snippet:
    path: str
    line: int
    text: str  # the whole function, decorators included, ending in "\n"


def snippets(sources: list[Source], min_lines: int = 6, max_lines: int = 40) -> list[Snippet]:
    return [Snippet(src.path, fn.lineno, span(src, first_line(fn), fn.end_lineno).rstrip("\n") + "\n")
            for src in sources for fn in functions(src)
            if min_lines <= fn.end_lineno - first_line(fn) + 1 <= max_lines]


def long_contexts(pool: list[Snippet], n: int, rng: random.Random, reopen_lines: int = 2) -> list[Prompt]:
    """Snippets "# file: path" by path until ~LONG_CHARS, then a function from the first 2/3 re-opened."""
    out = []
    for i in range(n if pool else 0):
        picked, size = [], 0
        for s in rng.sample(pool, min(len(pool), 200)):
            piece = f"# file: {s.path}\n{s.text}\n"
            if size + len(piece) > LONG_CHARS - 400:  # room for the re-opened head
                continue
            picked.append((s, piece))
            size += len(piece)
        if len(picked) < 3:
            continue
        needle, _ = picked[rng.randrange(max(1, 2 * len(picked) // 3))]
        head, rest = lines_of(needle.text)[:reopen_lines], lines_of(needle.text)[reopen_lines:]
        context = "".join(piece for _, piece in picked)
        prompt = f"{context}# file: {needle.path} (again)\n{''.join(head)}"
        out.append(Prompt("long_context_retrieval", f"long_context_retrieval/{i}/{needle.path}:{needle.line}",
                          prompt, "".join(rest), needle.path))
    return out


# ---- the sets ------------------------------------------------------------------------------------

PER_FILE: dict[str, Callable[[Source, random.Random], list[Prompt]]] = {
    "code_continuation": continuations,
    "function_body": function_bodies,
    "repetition_editing": repetition_edits,
}


def build_prompt_sets(heldout: datasets.Dataset, per_category: int = 40, seed: int = 0) -> datasets.DatasetDict:
    """{category: Dataset} with up to `per_category` prompts each, the same for the same files and seed."""
    rows = sorted(zip(heldout["path"], heldout["text"]))
    sources = [Source(path, lines_of(text), parse(text)) for path, text in rows]
    sets = {}
    for k, category in enumerate(CATEGORIES):
        rng = random.Random(seed * 1009 + k)
        if category in PER_FILE:
            chosen = round_robin([PER_FILE[category](src, rng) for src in sources], per_category, rng)
        else:
            chosen = long_contexts(snippets(sources), per_category, rng)
        chosen = sorted(chosen, key=lambda p: p.id)
        sets[category] = datasets.Dataset.from_list([asdict(p) for p in chosen]) if chosen else \
            datasets.Dataset.from_dict({f: [] for f in Prompt.__dataclass_fields__})
    return datasets.DatasetDict(sets)


@cache
def stdlib_prompt_sets() -> datasets.DatasetDict:
    """The sets of this interpreter's held-out stdlib files (the zoo's split), built once a process
    (seconds): every experiment reads the same prompts, and an in-process sweep's trials share them."""
    return build_prompt_sets(build_corpus(stdlib_files())["heldout"])
