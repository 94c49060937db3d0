"""The layers are packages and the imports say so: a module imports only its own layer and those below.

core < data < training < lm, zoo, control, constraints (framework/) < verifiers < engine, proposers < serving
(engine/) < harness < measurement < recipes < experiments, and the top-level folders in that order
(FOLDERS). The engine and the proposers never import each other, and the engine imports no model runtime: it knows
targets and proposers by their Protocols in framework.core. Imports sit at module level, so
a module's dependencies are its first lines; the one exception is an optional back end (Triton). experiments/ holds
apps only (their library is measurement/, the train app's recipes are recipes/).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (layer, package prefixes it owns, layers it may import besides its own)
LAYERS = {
    "core": (("framework.core",), set()),
    "verifiers": (("verifiers",), {"core"}),
    "data": (("framework.data",), {"core"}),  # training text as token data of one tokenizer
    "training": (("framework.training",), {"core", "data"}),  # the loop and losses every drafter trains with
    "lm": (("framework.lm",), {"core"}),
    "zoo": (("framework.zoo",), {"core", "lm", "data", "training"}),
    "control": (("framework.control",), {"core"}),  # the speculation policies: the engine knows them by the Protocol
    "constraints": (("framework.constraints",), {"core"}),  # grammars through a grammar engine, as Constraints
    "engine": (("engine.loop",), {"core", "verifiers"}),  # knows its target by the Protocol, not HFTarget
    "metrics": (("framework.metrics",), set()),  # the reported figures, each by its definition, from decoding traces
    "workloads": (("framework.workloads",), {"core", "data", "zoo"}),  # benchmark prompt suites and their rendering
    "proposers": (("proposers",), {"core", "verifiers", "lm", "zoo", "data", "training"}),
    # continuous batching: the loop's Decoders joined as requests arrive, on HFTargets by default
    "serving": (("engine.scheduler",), {"core", "verifiers", "lm", "engine"}),
    "harness": (("harness",), {"core", "verifiers", "lm", "zoo", "control", "engine", "proposers", "data",
                                         "training", "constraints", "serving"}),
    # the measurement library of the apps: compare's cells and reports, workloads, runners, first-token tables, peers
    "measurement": (("measurement",), {"core", "verifiers", "lm", "zoo", "control", "engine", "proposers", "harness",
                                       "data", "training", "workloads", "metrics", "constraints", "serving"}),
    # the train app's recipes, one per drafter family: they run measurement's tree search
    "recipes": (("recipes",), {"core", "verifiers", "lm", "zoo", "control", "engine", "proposers", "harness",
                               "data", "training", "workloads", "metrics", "constraints", "serving", "measurement"}),
    "experiments": (("experiments",), {"core", "verifiers", "lm", "zoo", "control", "engine", "proposers", "harness",
                                       "data", "training", "workloads", "metrics", "constraints", "serving",
                                       "measurement", "recipes"}),
}
OPTIONAL_BACKENDS = ("framework.lm.tree_attention_triton", "verifiers.triton_chain", "verifiers.triton_rules")
# The third-party packages each layer may import directly (the standard library and torch aside). The core is torch
# and numpy (path_tree's trie); the engine imports no model runtime; only lm, zoo, proposers, harness, measurement,
# recipes and experiments may import transformers; xgrammar only through constraints (and experiments' grammar
# benchmark).
THIRD_PARTY = {
    "core": {"numpy"},
    "verifiers": {"triton"},
    "data": {"datasets", "jinja2", "tqdm"},
    "training": {"accelerate", "tqdm"},
    "lm": {"transformers", "safetensors", "tokenizers", "triton"},
    "zoo": {"transformers", "tokenizers", "datasets", "tqdm"},
    "control": set(),
    "constraints": {"xgrammar"},
    "engine": set(),
    "serving": set(),
    "metrics": set(),
    "workloads": {"datasets"},
    "proposers": {"transformers", "safetensors", "datasets", "numpy", "tqdm"},
    "harness": {"transformers", "numpy", "scipy"},
    # vllm: the worker script measurement.peers.engine runs under vLLM's own environment, never imported here
    "measurement": {"transformers", "hydra", "omegaconf", "numpy", "tqdm", "matplotlib", "yaml", "vllm"},
    "recipes": {"transformers", "hydra", "omegaconf"},
    "experiments": {"transformers", "hydra", "omegaconf", "xgrammar", "llguidance", "outlines_core"},
}
KNOWN_THIRD_PARTY = set().union(*THIRD_PARTY.values()) | {"accelerate", "datasets", "jinja2"}
DYNAMIC_IMPORT_SHIMS = ("framework",)  # the package's lazy re-exports of the names scripts use
REEXPORTS = ("framework", "engine")  # package inits that only re-export their own modules' public names
# The top-level folders, bottom first: a folder's layers import only from folders at or below it
FOLDERS = ("framework", "verifiers", "proposers", "engine", "harness", "measurement", "recipes", "experiments")
PEERS = {("proposers", "engine")}  # side by side: neither imports the other


def layer_of(module: str) -> str | None:
    """The layer owning the longest prefix of `module` (engine.scheduler is serving's, engine's the rest)."""
    owners = [(len(p), layer) for layer, (prefixes, _) in LAYERS.items() for p in prefixes
              if module == p or module.startswith(p + ".")]
    return max(owners)[1] if owners else None


def folder_violations(layers: dict = LAYERS) -> list[str]:
    """Layers whose allowed imports reach a folder above their own (or a peer folder)."""
    found = []
    for layer, (prefixes, allowed) in layers.items():
        mine = FOLDERS.index(prefixes[0].split(".")[0])
        for other in allowed:
            theirs = FOLDERS.index(layers[other][0][0].split(".")[0])
            if theirs > mine or (theirs != mine and (FOLDERS[mine], FOLDERS[theirs]) in PEERS | {
                    (b, a) for a, b in PEERS}):
                found.append(f"{layer} ({FOLDERS[mine]}/) may import {other} ({FOLDERS[theirs]}/), a folder above")
    return found


def test_the_folders_are_the_layer_stack():
    """No folder imports from one above it: framework/ is wholly below the verifiers, the harness above the loop."""
    assert folder_violations() == []
    planted = {**LAYERS, "lm": (("framework.lm",), {"core", "verifiers"})}
    assert folder_violations(planted) == ["lm (framework/) may import verifiers (verifiers/), a folder above"]


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(tree: ast.Module):
    """(imported module, is at module level) for every import of a project package."""
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in FOLDERS:
                yield node, name, id(node) in top


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for package in FOLDERS:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(path, root)
            layer = layer_of(module)
            if module in REEXPORTS:
                continue
            where = f"{path.relative_to(root)}"
            if layer is None:
                found.append(f"{where}: belongs to no layer (framework/ holds only core, data, training, lm, control, "
                             "constraints, metrics, workloads, zoo)")
                continue
            for node, name, at_top in project_imports(ast.parse(path.read_text())):
                if name == "framework":
                    found.append(f"{where}:{node.lineno}: imports the bare 'framework' package; "
                                 "name the layer's module")
                    continue
                target = layer_of(name)
                if target is None:
                    found.append(f"{where}:{node.lineno}: imports {name}, which belongs to no layer")
                elif target != layer and target not in LAYERS[layer][1]:
                    found.append(f"{where}:{node.lineno}: {layer} imports {name} ({target}), "
                                 "a layer above or beside it")
                if not at_top and name not in OPTIONAL_BACKENDS:
                    found.append(f"{where}:{node.lineno}: imports {name} inside a function; "
                                 "only optional back ends may")
    return found


def test_every_import_respects_the_layers():
    assert violations() == []


def dynamic_imports(root: Path = ROOT) -> list[str]:
    """importlib.import_module / __import__ calls: a dependency no import statement shows, so refused outside the
    re-export shim (a static tool cannot follow them)."""
    found = []
    for package in FOLDERS:
        for path in sorted((root / package).rglob("*.py")):
            if module_name(path, root) in DYNAMIC_IMPORT_SHIMS:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call)
                        and ast.unparse(node.func).split(".")[-1] in ("import_module", "__import__")):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: a dynamic import ({ast.unparse(node)})")
    return found


def test_no_dynamic_imports_hide_a_dependency():
    assert dynamic_imports() == []


def import_linter_contracts(layers: dict = LAYERS, third_party: dict = THIRD_PARTY) -> str:
    """import-linter's contracts (INI), one forbidden contract per layer: the layers it may not import and the
    third-party packages it may not import directly. import-linter reads every import, in functions too."""
    lines = ["[importlinter]", "root_packages =",
             *(f"    {p}" for p in FOLDERS),
             "include_external_packages = True", ""]
    for layer, (prefixes, allowed) in layers.items():
        others = [p for other, (owned, _) in layers.items() if other != layer and other not in allowed for p in owned]
        external = sorted(KNOWN_THIRD_PARTY - third_party[layer])
        lines += [f"[importlinter:contract:{layer}]", f"name = {layer} imports its own layer, those below and "
                  f"{', '.join(sorted(third_party[layer])) or 'no third-party package but torch'}", "type = forbidden",
                  "source_modules =", *(f"    {p}" for p in prefixes), "forbidden_modules =",
                  *(f"    {m}" for m in others + external), "allow_indirect_imports = True", ""]
    return "\n".join(lines)


def lint_imports(root: Path, contracts: str, tmp_path: Path) -> subprocess.CompletedProcess:
    config = tmp_path / "importlinter.ini"
    config.write_text(contracts)
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
               "sys.exit(lint_imports_command())", str(config), "--no-cache"]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_import_linter_keeps_the_layers_and_the_third_party_rules(tmp_path):
    done = lint_imports(ROOT, import_linter_contracts(), tmp_path)
    assert done.returncode == 0 and "0 broken" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


def test_import_linter_catches_a_model_runtime_in_the_engine_and_numpy_in_the_verifiers(tmp_path):
    """A copy of the packages with two planted imports: transformers in the engine, numpy in a verifier."""
    import shutil

    for package in FOLDERS:
        shutil.copytree(ROOT / package, tmp_path / "src" / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.safetensors", "*.pt", "*.json*"))
    engine = tmp_path / "src" / "engine" / "loop.py"
    engine.write_text("import transformers\n" + engine.read_text())
    rules = tmp_path / "src" / "verifiers" / "rules.py"
    rules.write_text(rules.read_text() + "\n\ndef late():\n    import numpy\n    return numpy\n")
    done = lint_imports(tmp_path / "src", import_linter_contracts(), tmp_path)
    assert done.returncode != 0
    assert ("engine.loop -> transformers" in done.stdout
            and "verifiers.rules -> numpy" in done.stdout), done.stdout[-3000:]


def entry_points(root: Path = ROOT) -> dict[str, ast.Module]:
    """experiments' modules run as `python -m experiments.<name>` (they end in a __main__ guard)."""
    found = {}
    for path in sorted((root / "experiments").glob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.If) and "__main__" in ast.dump(node.test) for node in tree.body):
            found[module_name(path, root)] = tree
    return found


def entry_point_imports(root: Path = ROOT) -> list[str]:
    """Entry points share measurement's libraries, never one another."""
    mains = entry_points(root)
    return [f"{module} imports {name}, another entry point" for module, tree in mains.items()
            for _, name, _ in project_imports(tree) if name in mains and name != module]


def test_every_entry_point_is_a_hydra_app_with_its_config():
    """One CLI style: `python -m experiments.<name> key=value ...`, its settings in conf/<config_name>.yaml."""
    for module, tree in entry_points().items():
        main = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None)
        assert main is not None, f"{module} has no main()"
        hydra_main = [d for d in main.decorator_list if "hydra.main" in ast.unparse(d)]
        assert hydra_main, f"{module}.main is not a Hydra app"
        config = next(k.value.value for k in hydra_main[0].keywords if k.arg == "config_name")
        assert (ROOT / "conf" / f"{config}.yaml").is_file(), f"{module}: no conf/{config}.yaml"


def test_no_entry_point_imports_another():
    assert entry_point_imports() == []
    assert {"experiments.run", "experiments.compare", "experiments.check"} <= set(entry_points())


# experiments/ holds apps only; what else is there is named here, with why
SUBFOLDERS = {
    "zoo": "the committed models (weights, configs, tokenizers; no code): framework.zoo loads them by path",
    "peers": "the peer engines' apps (setup, law, profile_plain); their library is measurement/peers",
}
NOT_HYDRA = {"experiments.peers.setup": "builds a peer's virtual environment by name (argparse): no config"}


def is_app(tree: ast.Module, hydra_app: bool = True) -> bool:
    """A __main__ guard and (a Hydra app) a main() decorated with hydra.main."""
    guarded = any(isinstance(node, ast.If) and "__main__" in ast.dump(node.test) for node in tree.body)
    hydra_main = any(isinstance(node, ast.FunctionDef) and node.name == "main"
                     and any("hydra.main" in ast.unparse(d) for d in node.decorator_list) for node in tree.body)
    return guarded and (hydra_main or not hydra_app)


def not_apps(root: Path = ROOT) -> list[str]:
    """Modules of experiments/ (and of its peers/) that are not apps, and folders that are neither zoo/ nor peers/."""
    found = [f"experiments/{path.name}/: a folder of experiments/ that is neither {' nor '.join(SUBFOLDERS)}"
             for path in sorted((root / "experiments").iterdir())
             if path.is_dir() and path.name not in SUBFOLDERS and path.name != "__pycache__"]
    for path in sorted([*(root / "experiments").glob("*.py"), *(root / "experiments" / "peers").glob("*.py")]):
        module = module_name(path, root)
        if path.name == "__init__.py":
            continue
        if not is_app(ast.parse(path.read_text()), module not in NOT_HYDRA):
            found.append(f"{path.relative_to(root)}: not an app (a Hydra main() and a __main__ guard); "
                         "a library goes to measurement/")
    return found


def test_experiments_holds_apps_only(tmp_path):
    assert not_apps() == []
    assert all((ROOT / (m.replace(".", "/") + ".py")).is_file() for m in NOT_HYDRA)  # none stale
    (tmp_path / "experiments" / "peers").mkdir(parents=True)
    (tmp_path / "experiments" / "library.py").write_text("def helper():\n    pass\n")
    (tmp_path / "experiments" / "app.py").write_text("import hydra\n\n\n@hydra.main(config_path=None)\n"
                                                     "def main(cfg):\n    pass\n\n\nif __name__ == '__main__':\n"
                                                     "    main()\n")
    (tmp_path / "experiments" / "stray").mkdir()
    assert not_apps(tmp_path) == [
        "experiments/stray/: a folder of experiments/ that is neither zoo nor peers",
        "experiments/library.py: not an app (a Hydra main() and a __main__ guard); a library goes to measurement/"]


def test_the_check_catches_an_upward_and_a_hidden_import(tmp_path):
    for package, text in {
        "framework/core/bad.py": "from engine.loop import generate\n",
        "verifiers/bad.py": "def f():\n    from verifiers.rules import PointRule\n",
        "proposers/bad.py": "import engine.loop\n",
        "framework/stray.py": "",
        "experiments/ok.py": "from harness.exact import exact_law\n",
    }.items():
        (tmp_path / package).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / package).write_text(text)
    found = violations(tmp_path)
    assert len(found) == 4, found
    assert any("core imports engine.loop" in line for line in found)
    assert any("inside a function" in line for line in found)
    assert any("proposers imports engine.loop" in line for line in found)
    assert any("stray.py: belongs to no layer" in line for line in found)
    (tmp_path / "experiments" / "one.py").write_text("if __name__ == '__main__':\n    pass\n")
    (tmp_path / "experiments" / "two.py").write_text("from experiments.one import x\n"
                                                     "if __name__ == '__main__':\n    pass\n")
    assert entry_point_imports(tmp_path) == ["experiments.two imports experiments.one, another entry point"]
