"""The text a REST datastore is built from: the zoo corpus, or a local dataset given by path.

A local path is a dataset saved with `save_to_disk`, or data files (one file or a folder of them)
read with `datasets.load_dataset`: .json/.jsonl, .csv and .parquet by their builder, anything else
as plain text, one document per file. A stamp (sizes and modification times of the files) tells
whether a cached datastore is still the source's.
"""

from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import datasets

from framework.zoo.corpus import build_corpus, stdlib_files

ZOO = "zoo"  # the zoo corpus: this interpreter's standard library (framework/zoo/corpus.py)
BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}  # else "text"
SAVED_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")  # written by save_to_disk


@dataclass
class TextSource:
    label: str  # short name for the cache folder
    settings: dict  # what selects the text (resolved source, split, column): the cache key
    stamp: str  # changes when the files change

    def dataset(self) -> datasets.Dataset:
        """The rows (one document each); the text is in settings["text_column"]."""
        if self.settings["source"] == ZOO:
            dataset = pick_split(build_corpus(stdlib_files()), self.settings["split"], ZOO)
        else:
            dataset = load_local(Path(self.settings["source"]), self.settings["split"])
        column = self.settings["text_column"]
        if column not in dataset.column_names:
            raise ValueError(f"the REST source {self.settings['source']!r} has no column {column!r} "
                             f"(columns: {dataset.column_names}); set text_column")
        return dataset


def text_source(source: str, text_column: str = "text", split: str = "train") -> TextSource:
    if source == ZOO:
        stamp = f"python {sys.version_info.major}.{sys.version_info.minor} {sysconfig.get_paths()['stdlib']}"
        return TextSource(ZOO, {"source": ZOO, "split": split, "text_column": text_column}, stamp)
    path = Path(source).expanduser().resolve()
    if not path.exists():
        raise ValueError(f"the REST source {source!r} is neither {ZOO!r} nor an existing file or folder ({path})")
    files = data_files(path) if path.is_dir() else [path]
    listing = [(f.relative_to(path).as_posix() if path.is_dir() else f.name, f.stat().st_size, f.stat().st_mtime_ns)
               for f in files]
    stamp = hashlib.sha256(json.dumps(listing).encode()).hexdigest()
    return TextSource(path.stem or "source", {"source": str(path), "split": split, "text_column": text_column}, stamp)


def data_files(folder: Path) -> list[Path]:
    """Every file under the folder, sorted, hidden ones (and their folders) left out."""
    return sorted(f for f in folder.rglob("*")
                  if f.is_file() and not any(part.startswith(".") for part in f.relative_to(folder).parts))


def pick_split(data, split: str, source: str) -> datasets.Dataset:
    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            raise ValueError(f"the REST source {source!r} has no split {split!r} (splits: {sorted(data)}); set split")
        return data[split]
    return data


def load_local(path: Path, split: str) -> datasets.Dataset:
    if path.is_dir() and any((path / marker).is_file() for marker in SAVED_MARKERS):
        return pick_split(datasets.load_from_disk(str(path)), split, str(path))
    files = data_files(path) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"the REST source {str(path)!r} is an empty folder")
    builders = {BUILDERS.get(f.suffix.lower(), "text") for f in files}
    if len(builders) > 1:
        raise ValueError(f"the REST source {str(path)!r} mixes file kinds ({sorted(builders)}); give one kind of file")
    builder = builders.pop()
    options = {"sample_by": "document"} if builder == "text" else {}  # a text file is one document
    return datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train", **options)
