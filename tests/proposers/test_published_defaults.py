"""A published EAGLE head runs at its documented command (`python -m experiments.run target.path=T proposer=eagle3
models.eagle3.head.path=H`) with SafeAILab's published defaults when no tree was measured for it (no eagle_tree.json
beside it), and the run says so; greedy stays plain greedy."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate

from experiments.run import run
from framework.core.tree_shape import TreeShape
from framework.lm.models import tiny_random_model
from proposers import EagleProposer
from proposers.eagle.defaults import EAGLE1_CHOICES, PUBLISHED
from proposers.eagle.head import random_head
from proposers.medusa.defaults import published_choices
from tests.test_configs import FAST, load

LAYOUTS = {"eagle": ("eagle", None, None), "eagle2": ("eagle", None, None), "eagle3": ("specforge", (0, 1, 2), 48)}
HEAD_KEY = {"eagle": "models.eagle.head.path", "eagle2": "models.eagle.head.path", "eagle3": "models.eagle3.head.path"}


@pytest.mark.parametrize("proposer", [p if p != "eagle2" else pytest.param(p, marks=pytest.mark.slow)
                                      for p in sorted(LAYOUTS)])
def test_the_documented_command_runs_a_published_head_with_the_published_defaults(proposer, tmp_path):
    layout, layers, draft_vocab = LAYOUTS[proposer]
    tiny_random_model("llama", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      seed=0).save_pretrained(tmp_path / "target")
    head = random_head(32, 64, 2, layers, "eagle3" if layers else "eagle", draft_vocab, num_heads=4, num_kv_heads=2,
                       intermediate_size=48, seed=1)
    head.save(tmp_path / "head", format=layout)  # the published layout: no eagle_tree.json
    cfg = load(f"target.path={tmp_path / 'target'}", f"proposer={proposer}",
               f"{HEAD_KEY[proposer]}={tmp_path / 'head'}",
               "sampling=greedy", "max_new_tokens=10", "prompt=[1,2,3,4,5]", f"output_dir={tmp_path / 'out'}", *FAST)
    with pytest.warns(UserWarning, match="no eagle_tree.json beside it.*SafeAILab/EAGLE's defaults"):
        result = run(cfg)
    assert result["tokens"] == result["plain_tokens"] and len(result["tokens"]) == 10


def test_the_published_defaults_are_eagles_and_a_measured_tree_wins_over_them():
    head = random_head(32, 64, 2, None, "eagle", seed=1)
    static = EagleProposer(head, "auto")
    assert static.shape.num_nodes == len(EAGLE1_CHOICES) == 25 and static.published == {"choices": PUBLISHED["choices"]}
    dynamic = EagleProposer(head, None, "auto", "auto", "auto")
    assert (dynamic.top_k, dynamic.depth, dynamic.budget) == (10, 7, 60)
    measured = random_head(32, 64, 2, None, "eagle", seed=1, searched={"top_k": 3, "depth": 2, "budget": 5})
    kept = EagleProposer(measured, None, "auto", "auto", "auto")
    assert (kept.top_k, kept.depth, kept.budget) == (3, 2, 5) and kept.published == {}


def test_the_documented_medusa_command_runs_published_heads_on_medusas_default_tree(tmp_path):
    """`python -m experiments.run target.path=T proposer=medusa models.medusa.heads.path=H` with Medusa-1 heads
    (FasterDecoding's layout, no medusa_tree.json): Medusa's own default tree, cut to the heads' depth, greedy = plain
    greedy."""
    from tests.proposers.test_published_medusa import TARGET, medusa_folder

    TARGET.save_pretrained(tmp_path / "target")
    folder, _ = medusa_folder(tmp_path / "heads", heads=3, stated=3)
    cfg = load(f"target.path={tmp_path / 'target'}", "proposer=medusa", f"models.medusa.heads.path={folder}",
               "sampling=greedy", "max_new_tokens=10", "prompt=[4,9,2]", f"output_dir={tmp_path / 'out'}", *FAST)
    with pytest.warns(UserWarning, match="no medusa_tree.json beside them.*FasterDecoding/Medusa's default tree"):
        result = run(cfg)
    assert result["tokens"] == result["plain_tokens"] and len(result["tokens"]) == 10
    with pytest.warns(UserWarning):
        assert instantiate(cfg.proposer)().shape.num_nodes == len(published_choices(3)) == 61  # depth <= 3 of 63


def test_medusas_measured_tree_wins_over_the_published_one():
    from proposers import MedusaProposer, load_head
    from proposers.medusa.heads import load_choices

    zoo = MedusaProposer(load_head("medusa"), "auto")  # the zoo heads' measured tree (medusa_tree.json)
    assert not zoo.published and zoo.shape.num_nodes == len(load_choices("medusa"))


SEARCH = ["search.ranks=3", "search.depth=3", "search.max_nodes=8", "search.new_tokens=12", "search.prompt_tokens=5",
          "search.cost_sizes=[0,4,8]", "search.cost_repeats=1", "search.budgets=[4,8]", "search.top_ks=[2]",
          "search.depths=[2]", "search.decode_prompts=1", "search.budget_tokens=8", "prompt=[1,2,3,4,5,6]"]


def search_cfg(tmp_path, head):
    return load(f"target.path={tmp_path / 'target'}", f"head={head}", *SEARCH, config_name="search_tree")


def test_search_tree_writes_a_measured_tree_beside_a_published_head_and_auto_reads_it(tmp_path):
    """The command the warning names: measured on the target's own continuations, written beside the SpecForge-layout
    head, and read by `auto` from then on: no warning, the measured settings, greedy still plain greedy."""
    import json
    import warnings

    from measurement.tree_search import search

    tiny_random_model("llama", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      seed=0, init_std=0.3).save_pretrained(tmp_path / "target")
    random_head(32, 64, 2, (0, 1, 2), "eagle3", 48, num_heads=4, num_kv_heads=2, intermediate_size=48,
                seed=1).save(tmp_path / "head", format="specforge")
    written = search(search_cfg(tmp_path, tmp_path / "head"))
    tree = json.loads(written.read_text())
    assert written == tmp_path / "head" / "eagle_tree.json" and (tree["top_k"], tree["depth"]) == (2, 2)
    assert tree["budget"] in (4, 8) and 1 <= len(tree["choices"]) <= 8 and set(tree["cost_ms"]) == {"0", "4", "8"}
    cfg = load(f"target.path={tmp_path / 'target'}", "proposer=eagle3",
               f"models.eagle3.head.path={tmp_path / 'head'}",
               "sampling=greedy", "max_new_tokens=10", "prompt=[1,2,3,4,5]", f"output_dir={tmp_path / 'out'}", *FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "published defaults" warning: the measured tree is there
        proposer = instantiate(cfg.proposer)()
        result = run(cfg)
    assert (proposer.top_k, proposer.depth, proposer.budget) == (2, 2, tree["budget"]) and proposer.published == {}
    assert result["tokens"] == result["plain_tokens"]


def test_search_tree_for_published_medusa_heads(tmp_path):
    import json

    from measurement.tree_search import search
    from tests.proposers.test_published_medusa import TARGET, medusa_folder

    TARGET.save_pretrained(tmp_path / "target")
    folder, _ = medusa_folder(tmp_path / "heads", heads=3, stated=3)
    tree = json.loads(search(search_cfg(tmp_path, folder)).read_text())
    cfg = load(f"target.path={tmp_path / 'target'}", "proposer=medusa", f"models.medusa.heads.path={folder}", *FAST)
    proposer = instantiate(cfg.proposer)()
    measured = TreeShape.from_choices([tuple(c) for c in tree["choices"]])
    assert not proposer.published and torch.equal(proposer.shape.parents, measured.parents)
    assert torch.equal(proposer.shape.ranks, measured.ranks)


def test_search_tree_refuses_a_head_it_cannot_search(tmp_path):
    from measurement.tree_search import search

    tiny_random_model("llama", vocab_size=64, hidden_size=32, num_layers=2, seed=0).save_pretrained(tmp_path / "target")
    with pytest.raises(FileNotFoundError, match="no head at"):
        search(search_cfg(tmp_path, tmp_path / "nowhere"))


def write_layout(layout: str, tmp_path) -> tuple[str, str, str]:
    """A tiny target and a head in `layout` (docs/published.md's table) -> (target path, proposer, head override)."""
    from proposers.medusa.heads import random_heads
    from tests.proposers.test_published_medusa import medusa2_folder, medusa_folder

    target = tiny_random_model("llama", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                               seed=0, init_std=0.3)
    target.save_pretrained(tmp_path / "target")
    eagle = dict(num_heads=4, num_kv_heads=2, intermediate_size=48, seed=1)
    if layout == "medusa2":  # the folder is the target and the heads
        return str(medusa2_folder(tmp_path / "medusa2", target)[0]), "medusa", "models.medusa.heads.path"
    if layout.startswith("medusa"):
        folder, _ = medusa_folder(tmp_path / "heads", heads=3, stated=3, version2=layout == "medusa-v2")
        return str(tmp_path / "target"), "medusa", f"models.medusa.heads.path={folder}"
    if layout == "ours-medusa":
        random_heads(32, 64, 3, seed=1).save(tmp_path / "heads")
        return str(tmp_path / "target"), "medusa", f"models.medusa.heads.path={tmp_path / 'heads'}"
    head = random_head(32, 64, 2, None if layout == "eagle" else (0, 1, 2), "eagle" if layout == "eagle" else "eagle3",
                       None if layout == "eagle" else 48, **eagle)
    options = {"embedding": target.get_input_embeddings().weight} if layout == "speculators" else {}
    head.save(tmp_path / "head", format={"ours-eagle3": "speculum"}.get(layout, layout), **options)
    return str(tmp_path / "target"), "eagle" if layout == "eagle" else "eagle3", \
        f"models.{'eagle' if layout == 'eagle' else 'eagle3'}.head.path={tmp_path / 'head'}"


@pytest.mark.parametrize("layout", ["ours-eagle3", "ours-medusa", "medusa1", "medusa-v2", "medusa2", "eagle",
                                    "specforge", "speculators"])
def test_every_layout_row_runs_by_its_documented_command(layout, tmp_path):
    """docs/published.md's command, `python -m experiments.run target.path=T proposer=...
    models.<family>.head(s).path=H`, with
    nothing measured beside the head: it runs on the published defaults, and greedy is the target's own greedy."""
    import warnings

    target, proposer, head = write_layout(layout, tmp_path)
    if layout == "medusa2":
        head = f"{head}={target}"
    cfg = load(f"target.path={target}", f"proposer={proposer}", head, "sampling=greedy", "max_new_tokens=10",
               "prompt=[4,9,2,7,1]", f"output_dir={tmp_path / 'out'}", *FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run(cfg)
    sequence = torch.tensor([[4, 9, 2, 7, 1]])
    model = tiny_random_model("llama", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                              seed=0, init_std=0.3)
    with torch.no_grad():
        for _ in range(10):  # the target's own forward, greedy, no cache
            sequence = torch.cat([sequence, model(sequence).logits[:, -1:].argmax(-1)], dim=1)
    assert result["tokens"] == result["plain_tokens"] == sequence[0, 5:].tolist()
