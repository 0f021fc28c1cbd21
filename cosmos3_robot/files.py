"""Files on disk: one atomic checkpoint writer and readers whose errors name the file.

Every folder of weights this package writes (a model, a trainer's step, an exported world model, a
VAE) goes through `atomic_folder`: it is built in a hidden sibling and renamed into place, so a
reader sees the old folder or the new one, never half of one (a kill -9 or a full disk leaves the
old folder as it was). Inside it, `write_checkpoint` writes safetensors files and JSON files.

Reading goes through `read_json` and `read_tensors`, which turn a truncated, garbage or missing file
into a `CheckpointError` that names the file and says how to get a good one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch import Tensor


class CheckpointError(ValueError):
    """A weights or config file that cannot be read as what it should be."""


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json(path: Path, data: Any) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def write_json_atomic(path: Path, data: Any) -> None:
    """One JSON file replaced in one rename: a reader sees the old file or the new one (numpy values
    and paths are written as plain JSON)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
    os.replace(tmp, path)


def _json_default(x: Any) -> Any:
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON-serialisable: {type(x).__name__}")


def save_tensors(path: Path, tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> None:
    from safetensors.torch import save_file

    save_file(
        {k: v.detach().contiguous().cpu() for k, v in tensors.items()},
        str(path),
        metadata={"format": "pt", **(metadata or {})},
    )
    with open(path, "rb") as f:
        os.fsync(f.fileno())


@contextmanager
def atomic_folder(folder: str | Path) -> Iterator[Path]:
    """Yields a temporary sibling folder; on success it replaces `folder` in one rename (an existing
    `folder` is moved aside first and deleted afterwards); on error it is removed."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the final folder should not be
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(tmp)
    old = None
    if folder.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
        os.rmdir(old)
        os.replace(folder, old)
    os.replace(tmp, folder)
    fsync_dir(folder.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_checkpoint(
    folder: Path,
    tensors: dict[str, dict[str, Tensor]],
    json_files: dict[str, Any],
    copy_files: Iterable[str | Path] = (),
) -> Path:
    """Write safetensors files (name -> tensors) and JSON files (name -> data) into `folder`, plus
    copies of `copy_files`. Names may hold '/' for sub-folders. Call it inside `atomic_folder`, or
    give a folder nobody reads yet."""
    for name, data in tensors.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        save_tensors(folder / name, data)
    for p in map(Path, copy_files):
        shutil.copyfile(p, folder / p.name)
    for name, data in json_files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        write_json(folder / name, data)
    return folder


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    """Parsed JSON of `path`; a missing, unreadable or garbage file raises naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(
            f"{what} {path} is not valid JSON ({type(e).__name__}: {e}); the file is truncated or "
            "corrupt: restore it, or write the folder again"
        ) from None


@contextmanager
def _open_safetensors(path: str | Path, fix: str):
    """`safe_open` of `path`, with a missing, truncated or garbage file raised naming it and `fix`."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {path} does not exist")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            yield f
    except (SafetensorError, OSError, RuntimeError) as e:
        raise CheckpointError(
            f"weights file {path} cannot be read as safetensors ({e}); it is truncated or corrupt: {fix}"
        ) from None


def read_tensors(path: str | Path, fix: str = "restore it, or write the folder again") -> dict[str, Tensor]:
    """Every tensor of a safetensors file; a missing, truncated or garbage file raises naming it
    (and `fix`, what to do about it)."""
    with _open_safetensors(path, fix) as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def check_safetensors(path: str | Path) -> None:
    """Raise naming `path` unless its safetensors header reads (cheap: no tensor is loaded)."""
    with _open_safetensors(path, "restore it, or write the folder again") as f:
        f.keys()


@contextmanager
def exclusive_lock(target: str | Path, command: str) -> Iterator[None]:
    """One writer per output: while held, a second run on `target` is refused (not raced). The lock
    is a file beside `target` (`.NAME.lock`), released when the process ends, even by kill -9."""
    import fcntl

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    path = target.parent / f".{target.name}.lock"
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(
                f"another `cosmos3-robot {command}` is writing {target} (lock {path}); wait for it to finish, "
                "or write elsewhere"
            ) from None
        yield
