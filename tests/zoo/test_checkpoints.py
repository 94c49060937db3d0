"""Checkpoints load by zoo name or by path; bad paths and dtypes are named; exports reload the same."""

import pytest
import torch

from framework.zoo.checkpoints import (
    EMBEDDED,
    export_checkpoint,
    load_causal_lm,
    resolve_checkpoint,
)


def test_checkpoint_paths_resolve_and_name_what_is_missing(tmp_path):
    assert resolve_checkpoint("target") == (EMBEDDED / "target").resolve()
    assert resolve_checkpoint(EMBEDDED / "draft") == (EMBEDDED / "draft").resolve()
    zoo = r"\['dflash', 'draft', 'draft_bpe', 'mtp', 'pard', 'target'\]"
    with pytest.raises(ValueError, match=r"missing.*embedded zoo models: " + zoo):
        resolve_checkpoint(tmp_path / "missing")
    with pytest.raises(ValueError, match="not a torch dtype"):
        load_causal_lm("draft", dtype="float33")


def test_export_reloads_to_the_same_logits(tmp_path):
    exported = export_checkpoint("draft", tmp_path / "draft")  # the committed weights are bf16 already
    ids = torch.tensor([[5, 17, 300, 2]])
    with torch.no_grad():
        a, b = (load_causal_lm(p)(ids).logits for p in ("draft", exported))  # [1, 4, V]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert (exported / "tokenizer.json").is_file() and load_causal_lm(exported).config.num_hidden_layers == 1
