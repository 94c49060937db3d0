"""The EAGLE draft heads, as published: one decoder layer that drafts at the feature level.

Head position t reads token x[t+1] (through an embedding) and a feature g_t, and outputs a
feature h_t whose logits predict token x[t+2]. g_t is the target's hidden state(s) at t where the
target has run, and the head's own output at the node's parent inside a drafted tree.

- EAGLE-1/2 (`Eagle1Head`, SafeAILab's `cnets1.Model`): g = the target's last post-norm hidden
  state; x = fc([embedding ; g]) (fc bias optional); layer 0 without input norm; no final norm;
  logits through the target's lm_head. The embedding is the target's.
- EAGLE-3 (`Eagle3Head`, SafeAILab's `cnets.Model`, SpecForge's `LlamaForCausalLMEagle3`): g =
  fc([low ; middle ; high]) of three target layers (hidden_states 2, L//2, L-3 by default) on
  the target's rows only; the layer reads [input_layernorm(embedding) ; hidden_norm(g)] and adds
  to g; logits = lm_head(norm(h)) over its own draft vocabulary, draft id d being target token
  d + d2t[d]. Tokens outside the draft vocabulary get -inf: never proposed.

The target's embedding and lm_head are handed in at each call, never copied into the head. `step` (the tree level
read, 0 for the committed positions) is for heads with a module per depth (MTP): EAGLE's one layer serves every depth.
Parameter names are the published ones (`fc`, `layers.0`, `midlayer`, `norm`, `lm_head`, `d2t`,
`t2d`), so our files and SafeAILab's differ only in their config (proposers/eagle/published.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

from framework.core import files
from framework.lm.models import sizes_stated
from proposers.common.head_files import read_head, save_head
from proposers.eagle.layers import Eagle1Layer, Eagle3Layer

CONFIG_FILE, WEIGHTS_FILE, TREE_FILE = "eagle_config.json", "eagle_head.safetensors", "eagle_tree.json"


@dataclass(frozen=True)
class EagleConfig:
    architecture: str  # "eagle" (EAGLE-1/2) or "eagle3"
    hidden_size: int  # the draft's width
    vocab_size: int  # the target's vocabulary
    target_num_layers: int | None = None  # the target's decoder layers, where known (checked against the target)
    target_layers: tuple[int, ...] | None = None  # hidden_states indices read; None: the architecture's default
    num_heads: int = 8
    num_kv_heads: int = 4
    head_dim: int | None = None  # None: hidden_size / num_heads
    intermediate_size: int = 768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0  # the draft's own (EAGLE-3 drafts keep 10000 whatever the target's)
    # transformers' RoPE dict (e.g. llama3 scaling); None: default RoPE at rope_theta
    rope_parameters: dict | None = None
    max_positions: int = 4096
    fc_bias: bool = True  # EAGLE-1: SafeAILab's default; LLaMA-3 heads have none
    attention_bias: bool = False  # SafeAILab's `qkv_bias`
    draft_vocab_size: int | None = None  # EAGLE-3: None = the target's vocabulary
    target_hidden_size: int | None = None  # EAGLE-3: the target's width when not the draft's (own embedding then)
    pard_token: int | None = None  # P-EAGLE: the token its mask positions read (then a learned mask_hidden too)

    def __post_init__(self) -> None:
        if self.architecture not in HEADS:
            raise ValueError(f"unknown EAGLE architecture {self.architecture!r} (have {', '.join(HEADS)})")
        if self.target_layers is not None:
            object.__setattr__(self, "target_layers", tuple(int(i) for i in self.target_layers))
            if not self.target_layers:
                raise ValueError("the head must read at least one target layer")
            if self.target_num_layers is not None:
                bad = [i for i in self.target_layers
                       if not -(self.target_num_layers + 1) <= i <= self.target_num_layers]
                if bad:
                    raise ValueError(f"target layers {bad} are outside the target's hidden states "
                                     f"0..{self.target_num_layers}")
        if self.architecture == "eagle" and self.target_layers not in (None, (-1,)):
            raise ValueError(f"EAGLE-1 reads the target's last hidden state only (target_layers [-1]), "
                             f"got {list(self.target_layers)}")
        if self.architecture == "eagle" and (self.draft_vocab_size or self.target_hidden_size):
            raise ValueError("EAGLE-1 has no draft vocabulary or target_hidden_size of its own: those are EAGLE-3's")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(f"hidden size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")
        if not 0 < (self.draft_vocab_size or self.vocab_size) <= self.vocab_size:
            raise ValueError(f"draft vocabulary {self.draft_vocab_size} must be in 1..{self.vocab_size}")
        if self.pard_token is not None and not 0 <= self.pard_token < self.vocab_size:
            raise ValueError(f"pard_token {self.pard_token} is outside the vocabulary 0..{self.vocab_size - 1}")

    @property
    def feature_layers(self) -> int:
        return 1 if self.architecture == "eagle" else len(self.target_layers or (0, 0, 0))

    def layers_for(self, target_num_layers: int) -> tuple[int, ...]:
        """The hidden_states indices this head reads from a target of that many decoder layers."""
        if self.target_layers is not None:
            return self.target_layers
        if self.architecture == "eagle":
            return (-1,)
        L = target_num_layers
        return (2, L // 2, L - 3)  # EAGLE's patched Llama: the inputs of layers 2, L//2, L-3

    def layer_config(self) -> LlamaConfig:
        return LlamaConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=1, num_attention_heads=self.num_heads, num_key_value_heads=self.num_kv_heads,
            head_dim=self.head_dim or self.hidden_size // self.num_heads, rms_norm_eps=self.rms_norm_eps,
            max_position_embeddings=self.max_positions, attention_bias=self.attention_bias,
            rope_parameters=dict(self.rope_parameters or {"rope_type": "default", "rope_theta": self.rope_theta}))


class EagleHead(nn.Module):
    """What both architectures share: config, rotary embedding, target checks, files."""

    def __init__(self, config: EagleConfig, searched: dict | None = None):
        """searched: what the training run measured and searched for this head (static choices,
        the dynamic tree's budget), from eagle_tree.json; proposers read it for `auto`."""
        super().__init__()
        self.config, self.searched = config, searched or {}
        self.rotary = LlamaRotaryEmbedding(config.layer_config())
        # a published file's copy: (row sums, row |sums|)
        self.stored_embedding: tuple[torch.Tensor, torch.Tensor] | None = None
        if config.pard_token is not None:  # P-EAGLE: the hidden state its mask positions read, in the target's space
            self.mask_hidden = nn.Parameter(
                torch.zeros(config.feature_layers * (config.target_hidden_size or config.hidden_size)))

    def mask_feature(self) -> torch.Tensor:
        """P-EAGLE: the feature g of a mask position [H] (mask_hidden fused as the target's hidden states are)."""
        if self.config.pard_token is None:
            raise ValueError("this EAGLE head has no mask positions (no pard_token): train a P-EAGLE head "
                             "(python -m experiments.train training=zoo_peagle)")
        return self.fused(self.mask_hidden.view(self.config.feature_layers, -1))

    def embedding(self, target_embedding: nn.Module) -> nn.Module:
        return target_embedding

    def draft_ids(self) -> torch.Tensor | None:
        """The target token of each draft id [Vd], or None when the draft's vocabulary is the target's."""
        return None

    def check_target(self, model) -> None:
        """Refuse a target this head was not made for, naming what differs."""
        c = self.config
        have = {"hidden size": model.config.hidden_size, "vocabulary": model.get_output_embeddings().weight.shape[0],
                "layer count": model.config.num_hidden_layers}
        want = {"hidden size": c.target_hidden_size or c.hidden_size, "vocabulary": c.vocab_size,
                "layer count": c.target_num_layers}
        differ = [f"{k} {want[k]} (this target: {have[k]})" for k in want if want[k] is not None and want[k] != have[k]]
        if differ:
            raise ValueError(f"this {c.architecture} head was made for a target with " + ", ".join(differ))
        if self.stored_embedding is not None:
            check_embedding(self.stored_embedding, model.get_input_embeddings().weight)

    def save(self, folder, dtype: torch.dtype = torch.bfloat16, extra: dict | None = None, format: str = "speculum",
             **options):
        """Write the head in our layout, or a published one (WRITERS: specforge, eagle, speculators; options go
        to its writer, e.g. speculators' embedding= and verifier=)."""
        if format != "speculum":
            if format not in WRITERS:
                raise ValueError(f"unknown head format {format!r} (have speculum, {', '.join(WRITERS)})")
            return WRITERS[format](self, folder, dtype, **options)
        config = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self.config).items()}
        return save_head(self, folder, {**config, **(extra or {})}, CONFIG_FILE, WEIGHTS_FILE, dtype)

    @classmethod
    def load(cls, path, dtype: torch.dtype = torch.float32) -> EagleHead:
        folder, stored, state = read_head(path, CONFIG_FILE, WEIGHTS_FILE, "EAGLE head",
                                          "python -m experiments.train training=zoo_eagle (or zoo_eagle3)")
        if "architecture" not in stored:
            raise ValueError(f"{folder / CONFIG_FILE} names no architecture: a head from before the published "
                             "architectures; retrain it (python -m experiments.train training=zoo_eagle)")
        searched = files.read_json(folder / TREE_FILE) if (folder / TREE_FILE).exists() else None
        return build_head(config_from(stored), state, searched, folder / WEIGHTS_FILE).to(dtype).eval()

    @classmethod
    def for_target(cls, model, architecture: str = "eagle", target_layers=None, **sizes) -> EagleHead:
        """A fresh head sized for `model` (a Hugging Face causal LM)."""
        c = model.config
        config = EagleConfig(architecture, c.hidden_size, model.get_output_embeddings().weight.shape[0],
                             c.num_hidden_layers, tuple(target_layers) if target_layers is not None else None, **sizes)
        return HEADS[architecture](config)


class Eagle1Head(EagleHead):
    def __init__(self, config: EagleConfig, searched: dict | None = None):
        super().__init__(config, searched)
        H = config.hidden_size
        self.fc = nn.Linear(2 * H, H, bias=config.fc_bias)
        self.layers = nn.ModuleList([Eagle1Layer(config.layer_config())])

    def fused(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's hidden states [..., 1, H] -> g [..., H]."""
        return hidden[..., 0, :]

    def forward(self, embedded: torch.Tensor, feature: torch.Tensor, positions: torch.Tensor, cache=None, step: int = 0,
                **attention) -> torch.Tensor:
        """embedded, feature [B, M, H], positions [B, M] -> h [B, M, H] (the next feature).
        attention: speculum_mask/speculum_backend (drafting) or attention_mask [B, 1, M, S] (training)."""
        x = self.fc(torch.cat([embedded, feature.to(embedded.dtype)], dim=-1))
        return self.layers[0](x, self.rotary(x, positions), cache, **attention)

    def draft_logits(self, h: torch.Tensor, lm_head: nn.Module, step: int = 0) -> torch.Tensor:
        return lm_head(h)

    def logits(self, h: torch.Tensor, lm_head: nn.Module, step: int = 0) -> torch.Tensor:
        """h [..., H] -> logits over the target's vocabulary [..., V]."""
        return lm_head(h)


class Eagle3Head(EagleHead):
    def __init__(self, config: EagleConfig, searched: dict | None = None):
        super().__init__(config, searched)
        H, V = config.hidden_size, config.vocab_size
        Vd = config.draft_vocab_size or V
        self.fc = nn.Linear(config.feature_layers * (config.target_hidden_size or H), H, bias=False)
        self.midlayer = Eagle3Layer(config.layer_config())
        self.norm = LlamaRMSNorm(H, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(H, Vd, bias=False)
        # its own embedding only when the target's is of another width (the published 70B drafts)
        self.embed_tokens = nn.Embedding(V, H) if config.target_hidden_size not in (None, H) else None
        self.register_buffer("d2t", torch.zeros(Vd, dtype=torch.long))  # draft id d -> target token d + d2t[d]
        self.register_buffer("t2d", torch.ones(V, dtype=torch.bool) if Vd == V else torch.zeros(V, dtype=torch.bool))

    def set_vocabulary(self, target_tokens: torch.Tensor) -> Eagle3Head:
        """The draft vocabulary: target_tokens [Vd], increasing (the published maps' rule)."""
        Vd = self.lm_head.out_features
        d2t = target_tokens.long() - torch.arange(Vd)
        t2d = torch.zeros(self.config.vocab_size, dtype=torch.bool)
        t2d[target_tokens.long().clamp(0, self.config.vocab_size - 1)] = True
        check_vocabulary(d2t, t2d, self.config.vocab_size)
        self.d2t.copy_(d2t)
        self.t2d.copy_(t2d)
        return self

    def embedding(self, target_embedding: nn.Module) -> nn.Module:
        return self.embed_tokens if self.embed_tokens is not None else target_embedding

    def draft_ids(self) -> torch.Tensor | None:
        if self.lm_head.out_features == self.config.vocab_size:
            return None
        return torch.arange(self.d2t.shape[0], device=self.d2t.device) + self.d2t

    def fused(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's hidden states [..., L, H_t] at the head's layers -> g [..., H]."""
        return self.fc(hidden.flatten(-2))

    def forward(self, embedded: torch.Tensor, feature: torch.Tensor, positions: torch.Tensor, cache=None, step: int = 0,
                **attention) -> torch.Tensor:
        """embedded, feature [B, M, H], positions [B, M] -> h [B, M, H], pre-norm (the next feature)."""
        return self.midlayer(embedded, feature.to(embedded.dtype), self.rotary(embedded, positions), cache, **attention)

    def draft_logits(self, h: torch.Tensor, lm_head: nn.Module | None = None, step: int = 0) -> torch.Tensor:
        """h [..., H] -> logits over the draft vocabulary [..., Vd]."""
        return self.lm_head(self.norm(h))

    def logits(self, h: torch.Tensor, lm_head: nn.Module | None = None, step: int = 0) -> torch.Tensor:
        """h [..., H] -> logits over the target's vocabulary [..., V]: -inf outside the draft vocabulary."""
        draft = self.draft_logits(h)
        ids = self.draft_ids()
        if ids is None:
            return draft
        full = draft.new_full((*draft.shape[:-1], self.config.vocab_size), float("-inf"))
        return full.index_copy(-1, ids, draft)


HEADS: dict[str, type[EagleHead]] = {"eagle": Eagle1Head, "eagle3": Eagle3Head}
# The published layouts a head writes besides ours (format -> writer(head, folder, dtype)), filled
# by proposers/eagle/published.py, which the proposers package imports.
WRITERS: dict = {}


def config_from(stored: dict) -> EagleConfig:
    """An EagleConfig from a saved dict (JSON lists become tuples; unknown keys are the run's records)."""
    known = {f.name for f in fields(EagleConfig)}
    return EagleConfig(**{k: v for k, v in stored.items() if k in known})


def build_head(config: EagleConfig, state: dict, searched: dict | None = None, where=None) -> EagleHead:
    """A head of the config's architecture holding `state`: every key, nothing unknown, or a named error."""
    head = HEADS[config.architecture](config, searched)
    missing, unknown = sorted(set(head.state_dict()) - set(state)), sorted(set(state) - set(head.state_dict()))
    shapes = [f"{k} {tuple(state[k].shape)} (expected {tuple(v.shape)})" for k, v in head.state_dict().items()
              if k in state and state[k].shape != v.shape]
    if missing or unknown or shapes:
        raise ValueError(f"{where or 'the weights'} do not fit an {config.architecture} head of this config: "
                         f"missing {missing[:6]}, unexpected {unknown[:6]}, shapes {shapes[:3]}")
    head.load_state_dict(state)
    if isinstance(head, Eagle3Head) and head.draft_ids() is not None:
        check_vocabulary(head.d2t, head.t2d, config.vocab_size)
    return head


def check_vocabulary(d2t: torch.Tensor, t2d: torch.Tensor, vocab_size: int) -> None:
    """The published draft-vocabulary maps: d + d2t[d] increasing inside the vocabulary, t2d marking exactly those."""
    ids = torch.arange(d2t.shape[0], device=d2t.device) + d2t
    if t2d.shape != (vocab_size,):
        raise ValueError(f"t2d has shape {tuple(t2d.shape)}, expected [{vocab_size}] (the target's vocabulary)")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"d2t maps draft ids outside the target's vocabulary 0..{vocab_size - 1}")
    if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise ValueError("d2t is not increasing: draft id d must map to target token d + d2t[d], in increasing order")
    if int(t2d.sum()) != d2t.shape[0] or not bool(t2d[ids].all()):
        raise ValueError(f"t2d marks {int(t2d.sum())} target tokens, not the {d2t.shape[0]} that d2t maps to")


def embedding_fingerprint(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(row sums, row sums of |w|) [V] in float64: enough to tell one embedding from another."""
    w = weight.detach().double()
    return w.sum(-1).cpu(), w.abs().sum(-1).cpu()


def check_embedding(stored: tuple[torch.Tensor, torch.Tensor], target_weight: torch.Tensor) -> None:
    """A head file's copy of the embedding must be the target's (up to bf16 rounding)."""
    sums, abs_sums = stored
    have, _ = embedding_fingerprint(target_weight)
    if have.shape != sums.shape or not bool(((have - sums).abs() <= 2**-7 * abs_sums + 1e-6).all()):
        raise ValueError("the head file's embed_tokens is not this target's embedding: EAGLE drafts read the target's "
                         "own; this head was trained for another target (or another copy of it)")


def random_head(hidden_size: int, vocab_size: int, target_num_layers: int, target_layers=None,
                architecture: str = "eagle", draft_vocab_size: int | None = None, num_heads: int = 2,
                num_kv_heads: int = 1, intermediate_size: int = 32, seed: int = 0, scale: float = 1.0,
                dtype: str = "float32", searched: dict | None = None, pard_token: int | None = None) -> EagleHead:
    """A random-weight head for the tiny random targets of tests and configs (weights ~ N(0, scale^2 / fan_in));
    an EAGLE-3 head with a draft vocabulary takes a random increasing subset of the target's."""
    sizes_stated(hidden_size=hidden_size, vocab_size=vocab_size, target_num_layers=target_num_layers)
    generator = torch.Generator().manual_seed(seed)
    config = EagleConfig(architecture, hidden_size, vocab_size, target_num_layers,
                         tuple(target_layers) if target_layers is not None else None, num_heads, num_kv_heads,
                         intermediate_size=intermediate_size, draft_vocab_size=draft_vocab_size, pard_token=pard_token)
    head = HEADS[architecture](config, searched)
    for name, p in head.named_parameters():
        if p.dim() > 1 or name == "mask_hidden":
            p.data.copy_(torch.randn(p.shape, generator=generator) * scale / p.shape[-1] ** 0.5)
    if isinstance(head, Eagle3Head) and draft_vocab_size:
        head.set_vocabulary(torch.randperm(vocab_size, generator=generator)[:draft_vocab_size].sort().values)
    return head.to(getattr(torch, dtype)).eval()
