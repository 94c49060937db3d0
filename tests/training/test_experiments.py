"""`python -m experiments.train training=... training.target=FOLDER data=sharegpt`: a user's chat target, end to
end."""

import json

import pytest
import torch
from hydra import compose, initialize_config_dir

from recipes import draft as train_draft
from recipes import eagle as train_eagle
from recipes import medusa as train_medusa
from recipes import mtp as train_mtp
from tests.test_configs import CONF

SMALL = ["training.train.steps=4", "training.train.batch_size=2", "training.train.block_size=48",
         "training.train.eval_every=4", "training.train.eval_tokens=96", "training.eval_tokens=96",
         "training.num_threads=1", "data.heldout_fraction=0.2", "data.valid_every=4"]
CONTINUATIONS = ["training.continuations.eval_sequences=4", "training.continuations.prompt_tokens=8",
                 "training.continuations.new_tokens=8", "training.continuations.batch=4"]
TREE = ["training.tree.cost_sizes=[0,4]", "training.tree.cost_repeats=1", "training.tree.budgets=[4]",
        "training.tree.top_ks=[2]", "training.tree.depths=[2]", "training.tree.budget_prompts=1",
        "training.tree.budget_tokens=4", "training.tree.max_nodes=8"]


def configured(option: str, chat_target, chat_files, tmp_path, *more: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=[
            f"training={option}", f"training.target={chat_target}", f"training.root={tmp_path / 'root'}",
            "data=sharegpt", f"data.source.path={chat_files['sharegpt']}", *SMALL, *more])


def test_eagle3_heads_for_a_chat_target(chat_target, chat_files, tmp_path):
    cfg = configured("zoo_eagle3", chat_target, chat_files, tmp_path, "loss=kl_vs_lk", *CONTINUATIONS, *TREE,
                     f"training.export={tmp_path / 'head'}", "training.export_speculators=null",
                     "training.head.draft_vocab_size=512", "training.head.intermediate_size=64",
                     "training.head.num_heads=2", "training.head.num_kv_heads=1",
                     "training.loss_comparison.prompts=2", "training.loss_comparison.new_tokens=4")
    out = train_eagle.run(cfg)
    saved = json.loads((out / "eagle_config.json").read_text())
    assert saved["target"] == chat_target.name and saved["loss"] in ("kl", "lk") and saved["draft_vocab_size"] == 512
    record = json.loads((tmp_path / "root" / "eagle3" / "acceptance.json").read_text())
    assert set(record) == {"kl", "lk"} and len(record["kl"]["text"]["accept_sampled"]) == 6  # per depth, held out
    paired = json.loads((out / "measurements.json").read_text())["paired_lengths"]
    assert set(paired["T=0.0"]["lk-kl"]) == {"mean", "se", "relative"}


@pytest.mark.slow  # the default tier trains EAGLE-3's head and DFlash's drafter on chat data
def test_mtp_module_for_a_chat_target(chat_target, chat_files, tmp_path):
    """Trained through the EAGLE pipeline, written in the speculators MTP layout with its searched settings beside
    it, read back as `auto` and decoding exactly what plain greedy does."""
    from framework.zoo.checkpoints import load_causal_lm
    from harness.real import greedy_identity
    from proposers import MtpProposer
    from proposers.mtp.layouts import read_mtp

    cfg = configured("zoo_mtp", chat_target, chat_files, tmp_path, "loss=lk", *CONTINUATIONS, *TREE,
                     "training.tree.chain_depths=[1,2]", f"training.export={tmp_path / 'mtp'}")
    out = train_mtp.run(cfg)
    measured = json.loads((out / "measurements.json").read_text())
    assert set(measured["chains"]) == {"1", "2"} and measured["loss"] == "lk"
    assert len(measured["acceptance"]["heldout"]["text"]["accept_sampled"]) == 6  # per depth, held out
    head, target = read_mtp(out), load_causal_lm(chat_target)
    assert head.searched["chain_depth"] in (1, 2) and head.searched["top_k"] == 2
    assert measured["parameters"] == sum(p.numel() for p in head.parameters())
    tree = MtpProposer(out, depth="auto", top_k="auto", budget="auto")
    assert (tree.top_k, tree.depth, tree.budget) == (2, 2, 4)
    assert greedy_identity(target, lambda: MtpProposer(head, depth="auto", top_k="auto"), torch.tensor([[1, 2, 3, 4]]),
                           12).equal


@pytest.mark.slow  # the default tier trains EAGLE-3's head and DFlash's drafter on chat data
def test_medusa_heads_for_a_chat_target(chat_target, chat_files, tmp_path):
    cfg = configured("zoo_medusa", chat_target, chat_files, tmp_path, *TREE[:2], "training.tree.max_nodes=8",
                     "training.train.num_heads=2", f"training.export={tmp_path / 'heads'}",
                     "training.training_text.continuations.eval_sequences=4",
                     "training.training_text.continuations.prompt_tokens=8",
                     "training.training_text.continuations.new_tokens=8")
    out = train_medusa.run(cfg)
    assert json.loads((out / "medusa_config.json").read_text())["target"] == chat_target.name


@pytest.mark.slow  # the default tier trains EAGLE-3's head and DFlash's drafter on chat data
def test_distilled_draft_for_a_chat_target(chat_target, chat_files, tmp_path):
    cfg = configured("distill_draft", chat_target, chat_files, tmp_path, f"training.export={tmp_path / 'draft'}",
                     "training.architecture.hidden_size=32", "training.architecture.intermediate_size=64")
    out = train_draft.run(cfg)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    draft = AutoModelForCausalLM.from_pretrained(out)
    assert draft.config.vocab_size == 40_000 and len(AutoTokenizer.from_pretrained(out)) == 40_000
    assert torch.isfinite(draft(torch.tensor([[1, 2, 3]])).logits).all()


def test_dflash_drafter_for_a_chat_target(chat_target, chat_files, tmp_path):
    """Trained through recipes/parallel.py, exported in z-lab's layout, decoding exactly what plain greedy
    does."""
    from framework.zoo.checkpoints import load_causal_lm
    from harness.real import greedy_identity
    from proposers import DFlashProposer, load_head
    from proposers.common.position_tree import load_choices
    from recipes import parallel as train_parallel

    cfg = configured("zoo_dflash", chat_target, chat_files, tmp_path, *CONTINUATIONS,
                     f"training.export={tmp_path / 'dflash'}", "training.tree.cost_sizes=[0,4]",
                     "training.tree.cost_repeats=1", "training.tree.max_nodes=6", "training.tree.budgets=[2]",
                     "training.tree.chains=[2]", "training.tree.budget_prompts=1",
                     "training.tree.budget_tokens=4",
                     "training.train.depth=3", "training.train.anchors=4", "training.drafter.mask_token_id=5",
                     "training.drafter.num_heads=2", "training.drafter.num_kv_heads=1",
                     "training.drafter.intermediate_size=64")
    out = train_parallel.run(cfg)
    record = json.loads((out / "measurements.json").read_text())["acceptance"]["kl"]
    assert len(record["heldout/text"]["accept_sampled"]) == 3  # per depth
    drafter, target = load_head(out), load_causal_lm(chat_target)
    assert drafter.config.block_size == 4 and drafter.config.mask_token_id == 5
    choices = load_choices(out)  # the tree searched for it
    assert 1 <= len(choices) <= 6 and max(len(c) for c in choices) <= 3
    assert greedy_identity(target, lambda: DFlashProposer(drafter, choices, "point"),
                           torch.tensor([[1, 2, 3, 4]]), 12).equal


def test_a_mask_token_without_an_embedding_is_refused(chat_target):
    import pytest

    from framework.zoo.checkpoints import load_causal_lm
    from recipes.parallel import fresh_dflash

    target = load_causal_lm(chat_target)
    with torch.no_grad():
        target.get_input_embeddings().weight[7] = 0
    with pytest.raises(ValueError, match="mask token 7 has a zero embedding"):
        fresh_dflash(target, depth=3, mask_token_id=7)


@pytest.mark.slow  # the default tier trains EAGLE-3's head and DFlash's drafter on chat data
def test_a_layerskip_fine_tune_of_a_chat_target(chat_target, chat_files, tmp_path):
    """training=zoo_layerskip: the target fine-tuned from its own weights, exported with its tokenizer, the cost
    (next-token loss) and the exits' agreement measured before and after; early_exit decodes plain greedy on it."""
    from framework.zoo.checkpoints import load_causal_lm
    from harness.real import greedy_identity
    from proposers import EarlyExitProposer
    from recipes import layerskip as train_layerskip

    cfg = configured("zoo_layerskip", chat_target, chat_files, tmp_path, "training.objective.exits=[1,2]",
                     "training.objective.layer_dropout=0.5", f"training.export={tmp_path / 'tuned'}")
    out = train_layerskip.run(cfg)
    measured = json.loads((out / "measurements.json").read_text())
    assert out == tmp_path / "tuned" and measured["steps"] == 4
    for when in ("before", "after"):
        assert set(measured[when]["exit_agreement"]) == {"1", "2", "3"}
        assert all(0.0 <= a <= 1.0 for a in measured[when]["exit_agreement"].values())
    assert measured["after"]["valid_loss"] != measured["before"]["valid_loss"]  # it was trained
    tuned = load_causal_lm(out)
    assert (out / "tokenizer.json").is_file()
    assert greedy_identity(tuned, lambda: EarlyExitProposer(exit_layer=2, depth=3),
                           torch.tensor([[5, 9, 2, 31, 7]]), 8).equal
