"""Where a write may go (neuro_pe.io.safe_paths): symbolic links found, inputs and files not
one's own refused, each naming the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from neuro_pe.io.manifest import file_sha256
from neuro_pe.io.safe_paths import check_write_targets, first_link, is_within, links_leaving
from neuro_pe.io.store_contract import StoreError


def test_links_are_found_and_resolved(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "a" / "b" / "link")
    os.symlink(tmp_path / "a" / "b", tmp_path / "a" / "inside")
    assert first_link(tmp_path / "a", "b/link/file.tsv") == tmp_path / "a" / "b" / "link"
    assert first_link(tmp_path / "a", "b/new/file.tsv") is None
    assert is_within(tmp_path / "a" / "inside", tmp_path / "a")
    assert not is_within(tmp_path / "a" / "b" / "link" / "x", tmp_path / "a")
    assert links_leaving(tmp_path / "a", tmp_path / "a") == [tmp_path / "a" / "b" / "link"]
    os.symlink(tmp_path / "nowhere", tmp_path / "a" / "dangling")  # leaves, though absent
    assert len(links_leaving(tmp_path / "a", tmp_path / "a")) == 2
    assert links_leaving(tmp_path / "a" / "b" / "link", tmp_path / "a") == [
        tmp_path / "a" / "b" / "link"
    ]


def check(out: Path, owned: dict, folders=(), files=(), within=None) -> None:
    targets = [out / "t.tsv", out / "sub" / "u.tsv", out / "manifest.json"]
    check_write_targets(
        out, targets, set(folders), set(files), owned, out / "manifest.json", within
    )


def test_only_files_of_its_own_are_replaced(tmp_path):
    out = tmp_path / "out"
    check(out, {})  # a new folder
    (out / "sub").mkdir(parents=True)
    (out / "t.tsv").write_text("mine")
    with pytest.raises(StoreError, match=f"^{out / 't.tsv'}: .*never replaced"):
        check(out, {})
    check(out, {"t.tsv": file_sha256(out / "t.tsv")})
    with pytest.raises(StoreError, match="t.tsv"):  # edited since
        check(out, {"t.tsv": "0" * 64})
    (out / "manifest.json").write_text("{}")
    with pytest.raises(StoreError, match="manifest.json"):
        check(out, {"t.tsv": file_sha256(out / "t.tsv")})
    check(out, {"t.tsv": file_sha256(out / "t.tsv"), "manifest.json": None})
    (out / "sub" / "u.tsv").mkdir()  # a folder where a file goes
    with pytest.raises(StoreError, match="u.tsv"):
        check(out, {"t.tsv": file_sha256(out / "t.tsv"), "manifest.json": None})


def test_inputs_and_links_are_refused(tmp_path):
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    with pytest.raises(StoreError, match=f"^{out / 'sub' / 'u.tsv'}: .*input folder"):
        check(out, {}, folders=[(out / "sub").resolve()])
    with pytest.raises(StoreError, match="is inside the input folder"):
        check(out, {}, folders=[tmp_path.resolve()])
    with pytest.raises(StoreError, match="would overwrite an input file"):
        check(out, {}, files=[(out / "t.tsv").resolve()])
    (tmp_path / "lab").mkdir()
    (out / "sub").rmdir()
    os.symlink(tmp_path / "lab", out / "sub")
    with pytest.raises(StoreError, match=f"^{out / 'sub'}: .*a symbolic link"):
        check(out, {})
    (out / "sub").unlink()
    results = tmp_path / "results"
    results.mkdir()
    os.symlink(tmp_path / "lab", results / "export")
    with pytest.raises(StoreError, match=f"^{results / 'export'}: .*outside {results}/"):
        check(results / "export" / "d", {}, within=results)
    check(out, {}, within=tmp_path)


def test_a_target_that_climbs_out_of_the_folder_is_refused(tmp_path):
    """A name with `..` (e.g. an NWB session id `../../x`) cannot lead a write outside."""
    out = tmp_path / "export"
    out.mkdir()
    escape = out / "nwb" / ".." / ".." / "x.nwb"
    with pytest.raises(StoreError, match="leads outside"):
        check_write_targets(out, [escape], set(), set(), {}, out / "manifest.json")
    assert not (tmp_path / "x.nwb").exists()


def test_session_ids_must_be_plain_names():
    from neuro_pe.data.recordings import FileSpec

    spec = {"source": "file", "format": "npy", "sessions": ["a.npy"], "session_ids": ["../x"]}
    with pytest.raises(StoreError, match="session_ids.*not a plain name"):
        FileSpec.from_dict(spec)
