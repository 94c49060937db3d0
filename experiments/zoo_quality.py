"""How good are the zoo models, and how well does the draft predict the target?

    python -m experiments.zoo_quality                       # the embedded zoo, every held-out file
    python -m experiments.zoo_quality target_path=zoo_runs/target/final draft_path=zoo_runs/draft/final
    python -m experiments.zoo_quality target_path=T draft_path=D max_files=5 json=quality.json

On the held-out stdlib files: bits per character of each model, top-1 agreement of draft and
target (teacher-forced), and greedy chain tokens per target forward for several chain depths on
code_continuation prompts. Scoring reads each file as [EOS, tokens...] (as training packs it) in
windows of window tokens, each token scored once: non-overlapping by default (the context
restarts at every window boundary), or sliding with stride (each window scores its last
`stride` tokens, which then see at least window - stride tokens of context).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import hydra
import torch
from omegaconf import DictConfig

from engine.loop import generate
from framework.core import files
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from framework.zoo.checkpoints import load_causal_lm
from framework.zoo.corpus import build_corpus, stdlib_files
from framework.zoo.prompts import build_prompt_sets
from framework.zoo.tokenizer import load_tokenizer
from proposers import DraftModelProposer


@dataclass
class Scores:
    nll_bits: float  # summed over every scored token
    tokens: int
    argmax: list[torch.Tensor]  # per window [S]: the model's top-1 next token at each scored position


@dataclass
class Piece:
    ids: torch.Tensor  # [T + 1]: T inputs, T targets
    scored: int  # only the last `scored` targets count: the earlier ones were scored by the previous piece


def windows(tokenizer, texts: list[str], window: int, stride: int | None = None) -> list[Piece]:
    """Per text, [EOS, *ids] read in windows of `window` targets starting every `stride` tokens.

    stride = window: non-overlapping (a token near a window's start sees little context);
    stride < window: each window scores only its last targets, so every one has >= window - stride
    tokens of context (except at the file's start). Each target is scored exactly once.
    """
    stride = stride or window
    if not 0 < stride <= window:
        raise ValueError(f"stride must be in 1..window ({window}), got {stride}")
    out = []
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        seq = torch.tensor([tokenizer.eos_token_id, *ids], dtype=torch.long)  # [N + 1]: targets 1..N
        done = 0  # targets 1..done are scored
        for start in range(0, len(seq) - 1, stride):
            end = min(start + window, len(seq) - 1)
            out.append(Piece(seq[start : end + 1], end - done))
            done = end
            if end == len(seq) - 1:
                break
    return out


@torch.no_grad()
def score(model, pieces: list[Piece], batch_size: int = 8) -> Scores:
    """Teacher-forced NLL (bits) and argmax at scored positions; batched among pieces of one shape."""
    nll, count, argmax = 0.0, 0, [torch.empty(0, dtype=torch.long)] * len(pieces)
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, piece in enumerate(pieces):
        by_shape.setdefault((len(piece.ids), piece.scored), []).append(i)
    for (_, scored), group in by_shape.items():
        for start in range(0, len(group), batch_size):
            idx = group[start : start + batch_size]
            batch = torch.stack([pieces[i].ids for i in idx])  # [B, T + 1]
            logits = model(batch[:, :-1]).logits.float()[:, -scored:]  # [B, S, V]
            targets = batch[:, -scored:]  # [B, S]
            nll += torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").item()
            count += targets.numel()
            for row, i in enumerate(idx):
                argmax[i] = logits[row].argmax(-1)  # [S]
    return Scores(nll / math.log(2), count, argmax)


def bits_per_char(scores: Scores, texts: list[str]) -> float:
    return scores.nll_bits / sum(len(t) for t in texts)


def agreement(a: Scores, b: Scores) -> float:
    """Fraction of positions where the two models' top-1 next tokens agree."""
    same = sum(int((x == y).sum()) for x, y in zip(a.argmax, b.argmax))
    return same / sum(len(x) for x in a.argmax)


def tokens_per_forward(target_model, draft_model, tokenizer, prompts: list[str], depth: int,
                       max_new_tokens: int = 64) -> float:
    """Greedy chain speculation: new tokens per target verification forward, over all prompts."""
    target = HFTarget(target_model)
    proposer = DraftModelProposer(draft_model, depth=depth)
    limit = target_model.config.max_position_embeddings - max_new_tokens - depth - 1
    emitted, forwards = 0, 0
    for prompt in prompts:
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"][-limit:]])  # [1, L]
        out = generate(target, proposer, ids, max_new_tokens, sampling=SamplingConfig(temperature=0), seed=0)
        emitted += out.stats.accepted_total + out.stats.target_forwards  # accepted + the target's own token
        forwards += out.stats.target_forwards
    return emitted / forwards if forwards else 0.0


@dataclass
class Report:
    files: int
    characters: int
    window: int
    stride: int
    target_bits_per_char: float
    draft_bits_per_char: float
    top1_agreement: float
    tokens_per_forward: dict[int, float]  # depth -> greedy chain tokens per target forward

    def markdown(self) -> str:
        rows = [
            f"Held-out: {self.files} files, {self.characters} characters, {self.window}-token windows every "
            f"{self.stride} tokens" + (" (non-overlapping)" if self.stride == self.window else ""),
            "", "| metric | value |", "|---|---|",
            f"| target bits/char | {self.target_bits_per_char:.4f} |",
            f"| draft bits/char | {self.draft_bits_per_char:.4f} |",
            f"| top-1 agreement (draft vs target) | {self.top1_agreement:.4f} |",
            "", "| depth | greedy tokens/forward |", "|---|---|",
            *(f"| {d} | {t:.3f} |" for d, t in self.tokens_per_forward.items()),
        ]
        return "\n".join(rows)


@hydra.main(config_path="../conf", config_name="zoo_quality", version_base="1.3")
def main(args: DictConfig) -> None:

    torch.set_num_threads(args.threads)
    target, draft = load_causal_lm(args.target_path), load_causal_lm(args.draft_path)
    tokenizer = load_tokenizer(args.tokenizer or target.config.name_or_path)
    heldout = build_corpus(stdlib_files(), heldout_fraction=args.heldout_fraction)["heldout"]  # sorted by path
    texts = heldout["text"][: args.max_files]

    pieces = windows(tokenizer, texts, args.window, args.stride)
    target_scores, draft_scores = score(target, pieces), score(draft, pieces)  # before HFTarget swaps attention
    prompts = build_prompt_sets(heldout)["code_continuation"]["prompt"][: args.prompts]
    report = Report(
        files=len(texts), characters=sum(len(t) for t in texts), window=args.window, stride=args.stride or args.window,
        target_bits_per_char=bits_per_char(target_scores, texts),
        draft_bits_per_char=bits_per_char(draft_scores, texts),
        top1_agreement=agreement(draft_scores, target_scores),
        tokens_per_forward={d: tokens_per_forward(target, draft, tokenizer, prompts, d, args.max_new_tokens)
                            for d in args.depths},
    )
    print(report.markdown())
    if args.json:
        files.write_json(args.json, asdict(report))
    return report


if __name__ == "__main__":
    main()
