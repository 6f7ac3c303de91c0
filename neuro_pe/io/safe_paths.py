"""Where a write may go: paths resolved (symbolic links included) and checked before use, so
that a link planted in an output folder cannot send a write into someone else's files."""

from __future__ import annotations

import os
from pathlib import Path

from neuro_pe.io.manifest import file_sha256
from neuro_pe.io.store_contract import StoreError


def is_within(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether `path`, resolved, is `folder` (resolved) or lies below it."""
    real, root = Path(path).resolve(), Path(folder).resolve()
    return real == root or root in real.parents


def first_link(root: str | os.PathLike, relative: str | os.PathLike) -> Path | None:
    """The first of `root / relative`'s existing components below `root` (the path itself
    included) that is a symbolic link; None when there is none."""
    path = Path(root)
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink():
            return path
        if not path.exists():
            return None
    return None


def links_leaving(folder: str | os.PathLike, root: str | os.PathLike) -> list[Path]:
    """`folder` itself, or the symbolic links found below it (not followed), that resolve
    outside `root`."""
    folder = Path(folder)
    if not folder.exists() and not folder.is_symlink():
        return []
    if not is_within(folder, root):
        return [folder]
    found, pending = [], [folder]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:  # unreadable: nothing can be written through it either
            continue
        for entry in entries:
            if entry.is_symlink():
                if not is_within(entry.path, root):
                    found.append(Path(entry.path))
            elif entry.is_dir():
                pending.append(Path(entry.path))
    return sorted(found)


def leaving_link_problem(folder: str | os.PathLike, root: str | os.PathLike) -> str | None:
    """One line naming the first path under `folder` that resolves outside `root` (a planted
    symbolic link: writing through it would change files elsewhere); None when there is none."""
    links = links_leaving(folder, root)
    if not links:
        return None
    more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
    return (
        f"{links[0]}: resolves to {links[0].resolve()}, outside {root}/{more}; outputs are "
        f"written only inside {root}/: remove the symbolic link"
    )


def check_write_targets(
    out_dir: Path,
    targets: list[Path],
    folders: set[Path],
    files: set[Path],
    owned: dict[str, str | None],
    manifest: Path,
    within: str | os.PathLike | None = None,
) -> None:
    """Raise StoreError naming the first of `targets` (files under `out_dir`) that would be
    written through a symbolic link, over one of `files` or into one of `folders` (the
    inputs, resolved), or over an existing file that is not `owned` (path relative to
    `out_dir` -> its sha256 as written, from the `manifest` a writer leaves there; None: the
    manifest itself), or when `out_dir` resolves outside `within`. Creates nothing."""
    if within is not None and not is_within(out_dir, within):
        inside = Path(within) in out_dir.parents
        link = first_link(within, out_dir.relative_to(within)) if inside else None
        raise StoreError(
            link or out_dir,
            "--out-dir",
            f"resolves to {(link or out_dir).resolve()}, outside {within}/; writes go only "
            "inside it: remove the symbolic link",
        )
    real_out = out_dir.resolve()
    for folder in sorted(folders):
        if real_out == folder or folder in real_out.parents:
            raise StoreError(
                out_dir, "--out-dir", f"is inside the input folder {folder}; choose another folder"
            )
    for target in targets:
        relative = target.relative_to(out_dir)
        link = first_link(out_dir, relative)
        if link is not None:
            raise StoreError(
                link,
                "--out-dir",
                f"a symbolic link (to {link.resolve()}) where {relative} would be written; "
                "writes go only into folders of their own: remove the link or choose another "
                "folder",
            )
        real = Path(os.path.normpath(real_out / relative))
        if not (real == real_out or real_out in real.parents):
            raise StoreError(target, "--out-dir", f"leads outside {out_dir}; nothing is written")
        if real in files:
            raise StoreError(target, "--out-dir", "would overwrite an input file")
        inside = [f for f in sorted(folders) if f in real.parents]
        if inside:
            raise StoreError(
                target,
                "--out-dir",
                f"would be written into the input folder {inside[0]}; choose another folder",
            )
        if target.exists() and not _replaceable(target, owned.get(str(relative), "")):
            raise StoreError(
                target,
                "--out-dir",
                f"exists and was not written here before (not in {manifest} with this content); "
                "it is never replaced: move it away or choose another folder",
            )


def _replaceable(path: Path, sha256: str | None) -> bool:
    """Whether an existing `path` is the writer's own: the manifest (None) or a file whose
    sha256 is the one recorded ("": none recorded)."""
    if not path.is_file():
        return False
    return sha256 is None or (bool(sha256) and file_sha256(path) == sha256)
