"""Stage cache of a pipeline run: one folder per stage, complete once its record exists.

A stage's key hashes its kind, its configuration, the keys of the stages it reads
and the dmlfe version, so a changed parameter changes the key of that stage and of
every stage downstream of it, and nothing else. Layout::

    WORK_DIR/cache/KIND/KEY/          the stage's outputs (store, model, embeddings)
    WORK_DIR/cache/KIND/KEY/stage.json  written last, atomically: the completion mark

A folder without ``stage.json`` is what an interrupted stage left behind: it is
cleared and the stage runs again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from dmlfe._version import __version__
from dmlfe.tempfiles import write_atomically

RECORD = "stage.json"


def _canonical(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, list | tuple):
        return [_canonical(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _canonical(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    return obj


def to_json(obj: Any) -> Any:
    """A JSON-ready copy of ``obj`` (numpy scalars and arrays become plain values)."""
    return _canonical(obj)


def stage_key(kind: str, config: Any, inputs: list[str] | tuple[str, ...] = ()) -> str:
    """Key of a stage: sha256 of (kind, config, input keys, dmlfe version), 20 hex digits."""
    payload = json.dumps({"kind": kind, "config": _canonical(config), "inputs": list(inputs),
                          "dmlfe": __version__}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON under a temporary name and rename it into place."""
    text = json.dumps(to_json(obj), indent=2, default=str).encode("utf-8")
    write_atomically(path, lambda f: f.write(text))


class StageCache:
    """The stage folders under ``root`` (``WORK_DIR/cache``)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def dir(self, kind: str, key: str) -> Path:
        return self.root / kind / key

    def done(self, kind: str, key: str) -> bool:
        return (self.dir(kind, key) / RECORD).is_file()

    def record(self, kind: str, key: str) -> dict[str, Any]:
        path = self.dir(kind, key) / RECORD
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"stage {kind}/{key} has no record {path}: it has not run "
                                    "to completion") from None
        except ValueError as exc:
            raise ValueError(f"{path} is damaged ({exc}); delete {path.parent} to rerun that "
                             "stage") from None

    def start(self, kind: str, key: str) -> Path:
        """An empty folder for a stage about to run (remains of a failed attempt removed)."""
        d = self.dir(kind, key)
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        return d

    def finish(self, kind: str, key: str, record: dict[str, Any]) -> None:
        """Mark a stage complete by writing its record."""
        write_json_atomic(self.dir(kind, key) / RECORD, record)
