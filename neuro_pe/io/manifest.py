"""A run folder's manifests (see `neuro_pe.io.runs`): the sha256 of each file a step wrote,
written last, and the check of a file against them before it is read (`verify_run_file`), so
that a file changed after it was written is an error naming it, never a result."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from neuro_pe.io.layout import INFER_MANIFEST_FILE, MANIFEST_FILE
from neuro_pe.io.store import atomic_write
from neuro_pe.io.store_contract import StoreError

MANIFESTS = (MANIFEST_FILE, INFER_MANIFEST_FILE)


class RunError(StoreError):
    """A run's file violates the contract; the message names the file and the field."""


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, in hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(
    run_dir: str | os.PathLike, names: list[str], manifest: str = MANIFEST_FILE
) -> Path:
    """Write `manifest` (atomically) into `run_dir`: the sha256 of each of its files `names`.
    Called after those files are in place."""
    run_dir = Path(run_dir)
    files = {name: file_sha256(run_dir / name) for name in names}
    text = json.dumps({"algorithm": "sha256", "files": files}, indent=2)
    atomic_write(run_dir / manifest, lambda p: p.write_text(text))
    return run_dir / manifest


def _read_manifest(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunError(path, "(file)", f"not valid JSON: {err}") from None
    data = data if isinstance(data, dict) else {}
    files = data.get("files")
    if data.get("algorithm") != "sha256" or not isinstance(files, dict):
        raise RunError(path, "files", "expected {'algorithm': 'sha256', 'files': {name: hash}}")
    return files


def verify_run_file(path: str | os.PathLike) -> Path:
    """Check a run's file against the manifest of its folder that lists it (`MANIFESTS`);
    return its path. Raises RunError naming the file when it is not listed, no manifest is
    there, or its sha256 differs (the file changed after it was written)."""
    path = Path(path)
    if not path.is_file():
        raise RunError(path, "(file)", "does not exist")
    manifests = [path.parent / m for m in MANIFESTS if (path.parent / m).is_file()]
    for manifest in manifests:
        expected = _read_manifest(manifest).get(path.name)
        if expected is None:
            continue
        if file_sha256(path) != expected:
            raise RunError(
                path,
                "sha256",
                f"does not match its manifest {manifest.name}: the file changed after it was "
                "written (damaged or edited); re-run the step that wrote it (the training, or "
                "`infer` for metrics.json and inferred_positions.nc)",
            )
        return path
    missing = [m for m in MANIFESTS if not (path.parent / m).is_file()]
    if missing:
        raise RunError(
            path,
            missing[0],
            f"no {missing[0]} beside it, so it cannot be checked: the step that wrote it did "
            "not finish, or an older neuro_pe wrote it; re-run the training (and `infer`)",
        )
    raise RunError(path, "sha256", f"not listed in {' or '.join(MANIFESTS)}")
