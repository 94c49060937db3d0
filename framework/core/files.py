"""Files written whole: a reader, or a run resumed after a kill, sees the old version or the new one, never part.

Every writer goes through here: the new content goes to a temporary name beside the target (same folder,
same file system), is flushed to disk, and takes the target's name in one rename, which POSIX makes atomic.
A folder (a checkpoint, a model) is built under a temporary name and swapped in the same way; the old one
is kept aside until the new one is in place, and `recover_folder` puts it back if a kill fell between.
Appended records (records.jsonl) are one write each; a line cut off by a kill is dropped when read.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

ASIDE = ".old"  # suffix of a folder kept aside while its replacement is swapped in


def temporary_name(path: Path) -> Path:
    """A fresh name beside `path`, hidden, unique per process and call (never a name a reader looks for).
    It names the host and process, so that what a killed writer left can be told from a live one's."""
    return path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def remove_stale_temporaries(path: Path) -> None:
    """What writers of `path` that were killed left beside it (never a live writer's)."""
    for temporary in path.parent.glob(f".{path.name}.tmp-*"):
        host, pid, _ = temporary.name.rsplit("-", 2)
        if pid.isdigit() and not _alive(host.split(".tmp-", 1)[-1], int(pid)):
            _remove(temporary)


def _flush(path: Path) -> None:
    """To disk before the rename: a crash must not leave the new name on empty content."""
    if path.is_dir():
        for child in path.rglob("*"):
            if child.is_file():
                _flush(child)
        return
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path to write `path`'s new content to; when the block ends, the content takes
    `path`'s name in one rename. If the block fails, `path` stays as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    temporary = temporary_name(path)
    try:
        yield temporary
        _flush(temporary)
        os.replace(temporary, path)
    finally:
        _remove(temporary)


def write_text(path: str | Path, text: str) -> Path:
    with replacing(path) as temporary:
        temporary.write_text(text)
    return Path(path)


def write_bytes(path: str | Path, data: bytes) -> Path:
    with replacing(path) as temporary:
        temporary.write_bytes(data)
    return Path(path)


def write_json(path: str | Path, data, indent: int | None = 2) -> Path:
    return write_text(path, json.dumps(data, indent=indent))


def read_json(path: str | Path):
    """The JSON value in `path`; a file that is not JSON (torn, hand-edited, not UTF-8) is named with
    where it breaks."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.start})") from None


def save_figure(figure, path: str | Path, **kwargs) -> Path:
    """matplotlib's savefig, written whole (the format from `path`'s suffix)."""
    path = Path(path)
    with replacing(path) as temporary:
        figure.savefig(temporary, format=path.suffix.lstrip(".") or None, **kwargs)
    return path


def save_torch(obj, path: str | Path, keep_previous: bool = False) -> Path:
    """torch.save, written whole. keep_previous: the file it replaces stays as `previous_of(path)`, for a
    resume that finds the new one unreadable (a disk error, a copy cut short)."""
    path = Path(path)
    with replacing(path) as temporary:
        torch.save(obj, temporary)
        if keep_previous and path.exists():
            os.replace(path, previous_of(path))  # a kill right here leaves the previous one, which a resume reads
    return path


def previous_of(path: Path) -> Path:
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def load_torch(path: str | Path, what: str):
    """The first of `path` and its kept previous version that loads; None when neither exists.
    A file that fails to load is named, and moved aside (never overwritten later); the next is tried."""
    path = Path(path)
    for candidate in (path, previous_of(path)):
        if not candidate.exists():
            continue
        try:
            return torch.load(candidate, weights_only=False)
        except Exception as error:  # noqa: BLE001 - torn, truncated or foreign: any of them is unusable
            aside = candidate.with_name(candidate.name + ".unreadable")
            os.replace(candidate, aside)
            warnings.warn(f"{what}: {candidate} could not be loaded ({type(error).__name__}: {error}); "
                          f"moved to {aside.name}, trying an earlier one", stacklevel=2)
    return None


@contextmanager
def replacing_folder(folder: str | Path) -> Iterator[Path]:
    """Yields a temporary folder to build `folder`'s new content in; when the block ends it takes `folder`'s
    name. The old folder waits aside (`folder.old`) until then, and goes afterwards."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    recover_folder(folder)
    remove_stale_temporaries(folder)
    temporary = temporary_name(folder)
    temporary.mkdir()
    aside = folder.with_name(folder.name + ASIDE)
    try:
        yield temporary
        _flush(temporary)
        if folder.exists():
            os.replace(folder, aside)  # a kill between the two renames: recover_folder brings it back
        os.replace(temporary, folder)
        _remove(aside)
    finally:
        _remove(temporary)


def recover_folder(folder: str | Path) -> Path:
    """After a kill inside replacing_folder's swap: the folder kept aside takes its name back."""
    folder = Path(folder)
    aside = folder.with_name(folder.name + ASIDE)
    if aside.exists():
        if folder.exists():
            _remove(aside)  # the swap finished: the old one is no longer needed
        else:
            os.replace(aside, folder)
    return folder


def append_line(path: str | Path, line: str) -> None:
    """One record, appended in one write (a kill cuts at most this line, which read_lines then drops)."""
    with open(path, "a") as f:
        f.write(line.rstrip("\n") + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_json_lines(path: str | Path) -> list[dict]:
    """The records of a JSON-lines file. A last line cut off by a kill (no newline, or not JSON) is dropped
    from the file with a warning, so that the next append starts on a line of its own."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    complete, _, tail = data.rpartition(b"\n")
    records, bad = [], []
    for number, line in enumerate(complete.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                bad.append(number)
    if bad:
        raise ValueError(f"{path}: lines {bad[:5]} are not JSON: the file is damaged inside; "
                         "move it aside to start over, or mend those lines")
    if tail.strip():
        try:
            records.append(json.loads(tail))  # a whole record whose newline was never written
            append_newline = True
        except json.JSONDecodeError:
            append_newline = False
        if append_newline:
            with open(path, "ab") as f:
                f.write(b"\n")
        else:
            with open(path, "r+b") as f:
                f.truncate(len(complete) + (1 if complete else 0))
            warnings.warn(f"{path}: its last line was cut off (a run killed while writing it); dropped "
                          f"{len(tail)} bytes, the record will be made again", stacklevel=2)
    return records


class FolderBusy(RuntimeError):
    """Another live process is writing to the folder."""


def _holder(lock: Path) -> tuple[str, int] | None:
    try:
        host, pid = lock.read_text().split()
        return host, int(pid)
    except (OSError, ValueError):
        return None  # being written right now, or damaged: treated as held by nobody we can name


def _alive(host: str, pid: int) -> bool:
    if host != socket.gethostname():
        return True  # another machine's process: no way to tell from here, so it counts as running
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def exclusive(folder: str | Path, what: str) -> Iterator[Path]:
    """Holds `folder` for this process while the block runs (folder/.lock names its host and pid). A second
    process asking for it is refused with who holds it; a lock left by a process that died is taken over."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / ".lock"
    for _ in range(3):
        try:
            descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            holder = _holder(lock)
            if holder is not None and _alive(*holder):
                raise FolderBusy(f"{folder} is in use by another {what} (process {holder[1]} on {holder[0]}): wait "
                                 f"for it to finish, or give this one another folder (if that process is gone, "
                                 f"delete {lock})") from None
            warnings.warn(f"{lock}: left by a {what} that is no longer running; taking it over", stacklevel=3)
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(descriptor, "w") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}\n")
        break
    else:
        raise FolderBusy(f"could not take {lock}: other processes keep taking it")
    try:
        yield folder
    finally:
        lock.unlink(missing_ok=True)


_fresh: dict[str, str] = {}


def fresh_folder(base: str) -> str:
    """`base`, or `base_2`, `base_3`, ...: the first that did not exist, made now, so two runs started in the
    same second never share a folder. Once per base in a process (Hydra resolves its run folder more than once)."""
    if base not in _fresh:
        for n in range(1, 10_000):
            candidate = base if n == 1 else f"{base}_{n}"
            try:
                Path(candidate).mkdir(parents=True, exist_ok=False)
            except FileExistsError:
                continue
            _fresh[base] = candidate
            break
        else:
            raise FolderBusy(f"no free folder name left after {base}_9999")
    return _fresh[base]
