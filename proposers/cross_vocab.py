"""A draft model with another vocabulary: token-level intersection (TLI: Timor et al., ICML 2025; vLLM #38174).

The draft drafts only tokens both vocabularies spell alike: its law (temperature, top-k, top-p, min-p; no
penalty or bias: q need only be the law each token was drawn from) after a mask to the shared tokens (and to
what a grammar allows there, mapped), renormalized, is the q handed to the verifier, in the target's ids and
zero off the intersection. Exact at any temperature: the target's residual covers its whole vocabulary. The
same tokenizer with a padded embedding (Qwen's 151,936 vs 152,064) is the identity map over the ids both have:
the padding rows get zero draft probability.

The draft's context: each target token is read as its own spelling in the draft's tokens (one token where it
is shared, the draft's tokenization of its spelling where not), appended and never re-tokenized, so the draft's
cache only grows. Rows whose tokens expand to different lengths read them in one forward, each keeping its own:
batches of any size.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import torch

from framework.core.renamed import renamed
from framework.core.sampling import SamplingConfig, process_logits
from framework.core.verification import Verification
from framework.zoo.checkpoints import find_folder
from framework.zoo.tokenizer import load_tokenizer
from proposers.draft_model import DraftModelProposer, adaptive_depth_moved


class VocabularyMap:
    """Two vocabularies' correspondence. (A plain class, not a dataclass: Hydra turns a built dataclass back into
    a config, which cannot hold a tensor.)"""

    def __init__(self, target_of: torch.Tensor, expansions: tuple[tuple[int, ...], ...], target_size: int,
                 unspelled: int = 0):
        self.target_of = target_of  # [V_draft] the target id each draft token spells alike (-1: none)
        self.expansions = expansions  # per target id: the draft tokens that spell it
        self.target_size = target_size
        self.unspelled = unspelled  # target ids no draft tokens spell (padding): read as the placeholder draft token

    def single(self) -> torch.Tensor | None:
        """[V_target] each target id's one draft token, when every spelling is one token (else None)."""
        if any(len(pieces) != 1 for pieces in self.expansions):
            return None
        return torch.tensor([pieces[0] for pieces in self.expansions], dtype=torch.long)

    @property
    def draft_size(self) -> int:
        return self.target_of.numel()

    @property
    def shared(self) -> int:
        return int((self.target_of >= 0).sum())

    def spell(self, tokens: list[int]) -> list[int]:
        """Target tokens -> the draft tokens that spell them, in order."""
        return [piece for t in tokens for piece in self.expansions[t]]

    def draft_of(self) -> torch.Tensor:
        """[V_target] the draft id of each shared target token (-1: not shared)."""
        out = torch.full((self.target_size,), -1, dtype=torch.long)
        mapped = (self.target_of >= 0).nonzero().flatten()
        out[self.target_of[mapped]] = mapped
        return out

    @staticmethod
    def from_spellings(target: Sequence[str], draft: Sequence[str], encode_draft: Callable[[str], list[int]],
                       specials: dict[int, int] | None = None, target_size: int | None = None,
                       draft_size: int | None = None, placeholder: int = 0) -> VocabularyMap:
        """target / draft: each token's spelling in id order; encode_draft: the draft's tokens for a spelling no
        draft token has; specials: target id -> draft id where the spellings differ (the EOS); sizes: the models'
        embedding rows when they exceed the tokenizers' (padding: never drafted); placeholder: the draft token
        read for a target token it cannot spell (what the draft reads changes its acceptance, never the law)."""
        target_of = torch.full((draft_size or len(draft),), -1, dtype=torch.long)
        first = {}
        for i, text in enumerate(draft):
            first.setdefault(text, i)
        specials = specials or {}
        expansions = []
        for t, text in enumerate(target):
            d = specials.get(t, first.get(text))
            if d is not None and int(target_of[d]) < 0:
                target_of[d] = t
                expansions.append((d,))
            else:
                expansions.append(tuple(encode_draft(text)))
        expansions += [()] * ((target_size or len(target)) - len(target))
        if not bool((target_of >= 0).any()):
            raise ValueError("the two vocabularies share no token: nothing can be drafted")
        unspelled = sum(not pieces for pieces in expansions)
        expansions = [pieces or (placeholder,) for pieces in expansions]
        return VocabularyMap(target_of, tuple(expansions), target_size or len(target), unspelled)

    @staticmethod
    def padded(target_size: int, draft_size: int) -> VocabularyMap:
        """One tokenizer, embeddings padded to different sizes: ids below both sizes are the same token."""
        both = min(target_size, draft_size)
        target_of = torch.where(torch.arange(draft_size) < both, torch.arange(draft_size), -1)
        return VocabularyMap(target_of, tuple((t if t < both else 0,) for t in range(target_size)), target_size,
                             max(0, target_size - draft_size))

    @staticmethod
    def of_tokenizers(target_tokenizer, draft_tokenizer, target_size: int | None = None,
                      draft_size: int | None = None) -> VocabularyMap:
        """Two Hugging Face fast tokenizers: spellings are their vocabularies' own strings (byte-level BPEs spell
        bytes alike); a target token no draft token spells is split by the draft's own BPE model."""
        model = draft_tokenizer.backend_tokenizer.model
        spell = lambda tok: tok.convert_ids_to_tokens(list(range(len(tok))))  # noqa: E731
        specials = {target_tokenizer.eos_token_id: draft_tokenizer.eos_token_id} \
            if target_tokenizer.eos_token_id is not None and draft_tokenizer.eos_token_id is not None else {}
        return VocabularyMap.from_spellings(spell(target_tokenizer), spell(draft_tokenizer),
                                            lambda text: [piece.id for piece in model.tokenize(text)], specials,
                                            target_size, draft_size)

    @staticmethod
    def of_folders(
        target: str, draft: str, target_size: int | None = None, draft_size: int | None = None
    ) -> VocabularyMap:
        """The tokenizers saved beside two checkpoints (folders, or names in the embedded zoo)."""
        folder = lambda name: find_folder(name, "tokenizer.json") or name  # noqa: E731
        return VocabularyMap.of_tokenizers(load_tokenizer(folder(target)), load_tokenizer(folder(draft)), target_size,
                                           draft_size)


class CrossVocabularyProposer(DraftModelProposer):
    """DraftModelProposer over a draft of another vocabulary (settings as there; kind iid / wor / point)."""

    @renamed(gamma="depth")  # refused here too, under this class's name (settings pass on unread)
    @adaptive_depth_moved
    def __init__(self, draft_model, vocabulary: VocabularyMap, **settings):
        super().__init__(draft_model, **settings)
        if vocabulary.draft_size != self.lm.vocab_size:
            raise ValueError(f"the vocabulary map is for {vocabulary.draft_size} draft tokens, "
                             f"the draft has {self.lm.vocab_size}")
        self.vocabulary = vocabulary
        device = self.lm.device
        self.target_of = vocabulary.target_of.to(device)  # [V_d]
        self.shared = self.target_of >= 0  # [V_d]
        self.draft_of = vocabulary.draft_of().to(device)  # [V_t]
        single = vocabulary.single()  # one draft token per target token: spelled by a lookup, no ragged reads
        self.single = None if single is None else single.to(device)

    def check_vocabulary(self, target_vocab: int, target=None) -> None:
        """Another tokenizer by design: the map, not the ids, must fit the target."""
        if self.vocabulary.target_size != target_vocab:
            raise ValueError(f"the vocabulary map is for {self.vocabulary.target_size} target tokens, "
                             f"the target has {target_vocab}")

    def spell_prompts(self, rows: list[list[int]]) -> list[list[int]]:
        if self.single is not None:
            return [self.single[torch.tensor(row, dtype=torch.long, device=self.single.device)].tolist()
                    for row in rows]
        return [self.vocabulary.spell(row) for row in rows]

    # ---- the draft's law, in the target's ids --------------------------------------------------

    def draft_law(self, logits: torch.Tensor, cfg: SamplingConfig, seen, allowed=None) -> torch.Tensor:
        """logits [B, M, V_d] -> the law over the target's ids [B, M, V_t] the children are drawn from."""
        mask = self.shared.expand_as(logits)
        if allowed is not None:  # what the grammar allows at each row, read at the shared tokens
            allowed_shared = mask & allowed.to(logits.device)[..., self.target_of.clamp_min(0)]
            # a row where the grammar leaves no shared token draws from the shared ones: q is still the law drawn
            # from, and the verifier rejects what the target's mask forbids (an iid / wor node is never pruned)
            mask = torch.where(allowed_shared.any(-1, keepdim=True), allowed_shared, mask)
        own = process_logits(logits, replace(cfg, repetition_penalty=1.0, logit_bias=()), None, mask)
        law = torch.zeros(*logits.shape[:-1], self.vocabulary.target_size, dtype=own.dtype, device=own.device)
        return law.index_add_(-1, self.target_of[self.shared], own[..., self.shared])

    def draft_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.draft_of[tokens.to(self.draft_of.device)]  # tree tokens are shared tokens: one each

    # ---- the draft's context in its own tokens -------------------------------------------------

    def last_piece(self, root: torch.Tensor) -> torch.Tensor:
        """The root's spelling: all but its last draft token join the tokens read first; the last is returned."""
        if self.single is not None:
            return self.single[root.to(self.single.device)]
        spelled = [self.vocabulary.spell([t]) for t in root.tolist()]
        self.queue([pieces[:-1] for pieces in spelled])
        return torch.tensor([pieces[-1] for pieces in spelled], device=root.device)

    def root_width(self, root: torch.Tensor) -> int:
        return max(len(self.vocabulary.expansions[t]) for t in root.tolist())

    def read_root(self, root: torch.Tensor):
        return super().read_root(self.last_piece(root))

    def plain_step(self, root: torch.Tensor):
        return super().plain_step(self.last_piece(root))

    def commit(self, result: Verification) -> None:
        """Accepted nodes are shared tokens: the base keeps or defers them in the draft's ids."""
        tokens = torch.where(result.tokens >= 0, self.draft_of[result.tokens.clamp_min(0).to(self.draft_of.device)].to(
            result.tokens.device), -1)
        super().commit(Verification(tokens, result.num_accepted, result.path))
