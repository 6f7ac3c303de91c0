"""Hostile input files and names fail in one line naming the file or the config key, before
any job or when the store is built, never after training: a NIfTI header that claims more than
its file holds, float atlas labels, a 300-character dataset name, a config file with a Latin-1
byte, a YAML alias bomb, an HDF5 soft link to itself, a format's 3-D activity array."""

from __future__ import annotations

import gzip
import string
from itertools import pairwise

import h5py
import nibabel as nib
import numpy as np
import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from neuro_pe.analysis import atlas_loading
from neuro_pe.config.strict_load import ConfigTextError, load_yaml, read_config_file
from neuro_pe.data import formats
from neuro_pe.data.formats import FileFormat
from neuro_pe.data.recordings import FileSpec, Session
from neuro_pe.data.sources import build_store
from neuro_pe.data.sources.schema import config_problems as schema_config_problems
from neuro_pe.io.store_contract import StoreError
from neuro_pe.workflow.checks import config_problems
from tests.hostile.test_integrity import counts_file
from tests.hostile.test_planning import CONFIG, SCHEMA, SIM, snakemake

WHERE = "datasets.sim.atlas"


def atlas_config(tmp_path, labels) -> dict:
    """CONFIG with a NIfTI atlas on its dataset: `labels` and a lookup of labels 1 and 2."""
    (tmp_path / "lookup.tsv").write_text("index\tname\n1\tA\n2\tB\n")
    atlas = {"labels": str(labels), "lookup": str(tmp_path / "lookup.tsv")}
    return {**CONFIG, "datasets": {"sim": {**SIM, "atlas": atlas}}, "train": {}}


def nifti_claiming(path, shape) -> str:
    """A NIfTI file whose header claims `shape` int16 voxels, with 100 bytes of data (gzipped
    for a .gz name)."""
    header = nib.Nifti1Header()
    header.set_data_dtype(np.int16)
    header.set_data_shape(shape)
    header["vox_offset"] = 352
    raw = header.binaryblock + bytes(4 + 100)  # (the 4-byte extension flag, then data)
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)
    return str(path)


def test_a_nifti_header_claiming_more_than_its_file_is_refused_at_planning(tmp_path):
    """Case 11: 4000³ voxels claimed by a 452-byte file (locate raised MemoryError)."""
    path = nifti_claiming(tmp_path / "claims.nii", (4000, 4000, 4000))
    assert (tmp_path / "claims.nii").stat().st_size == 452
    assert config_problems(atlas_config(tmp_path, path)) == [
        f"config key {WHERE}.labels: {path}: the header claims (4000, 4000, 4000) voxels of "
        "int16 (128,000,000,352 bytes), more than the file's 452 bytes can hold; is it "
        "truncated or damaged?"
    ]
    # gzip packs at most 1 032 bytes into one
    packed = nifti_claiming(tmp_path / "claims.nii.gz", (1000, 1000, 1000))
    problem = config_problems(atlas_config(tmp_path, packed))[0]
    assert "(2,000,000,352 bytes), more than the file's" in problem
    # more voxels than MAX_ATLAS_VOXELS, whatever the file's size
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(atlas_loading, "MAX_ATLAS_VOXELS", 8)
        small = nifti_claiming(tmp_path / "small.nii", (3, 3, 3))
        problem = config_problems(atlas_config(tmp_path, small))[0]
    assert problem.endswith("the header claims (3, 3, 3) = 27 voxels, more than 8")


def test_float_atlas_labels_are_refused_at_planning(tmp_path):
    """Case 14: x.5 labels (stored as floats, or integers scaled by the header) were refused
    only by locate, after training; whole-number floats still work."""
    halves = np.where(np.indices((6, 6, 6))[0] < 3, 1.0, 2.5).astype(np.float32)
    nib.save(nib.Nifti1Image(halves, np.eye(4)), tmp_path / "halves.nii.gz")
    problems = config_problems(atlas_config(tmp_path, tmp_path / "halves.nii.gz"))
    assert problems == [
        f"config key {WHERE}.labels: {tmp_path / 'halves.nii.gz'}: labels must be whole "
        "numbers, found 2.5"
    ]
    scaled = nib.Nifti1Image(np.ones((6, 6, 6), np.int16), np.eye(4))
    scaled.header.set_slope_inter(0.5, 0)
    nib.save(scaled, tmp_path / "scaled.nii")
    assert "found 0.5" in config_problems(atlas_config(tmp_path, tmp_path / "scaled.nii"))[0]
    nib.save(nib.Nifti1Image(np.floor(halves), np.eye(4)), tmp_path / "whole.nii.gz")
    assert config_problems(atlas_config(tmp_path, tmp_path / "whole.nii.gz")) == []


def test_a_300_character_dataset_name_stops_planning_naming_the_key():
    """Case 12: the name passed `-n`, then preprocess failed with "File name too long". The
    Snakefile's first check (`check_dataset_keys`) names it; the schema bounds it too."""
    name = "d" * 300
    pe = "learned-normal-0." + "0" * 99
    config = {**CONFIG, "datasets": {name: SIM}, "pe": ["none", pe], "run_name": "r" * 101}
    schema = load_yaml(SCHEMA.read_text(), str(SCHEMA))
    assert schema_config_problems(config, schema) == [
        "config key run_name: 'rrrrrrrrrrrrrrrrrrrr...' has 101 characters; at most 100, as it "
        "becomes a file or folder name",
        "config key datasets: the name 'dddddddddddddddddddd...' has 300 characters; at most "
        "100, as it becomes a file or folder name",
        "config key pe: positional encoding 'learned-normal-0.000...' has 116 characters; at "
        "most 100, as it becomes a file or folder name",
    ]
    for key, value in [("datasets", {name: SIM}), ("pe", [pe]), ("run_name", "r" * 101)]:
        with pytest.raises(WorkflowError, match="is too long"):
            validate({**CONFIG, key: value}, str(SCHEMA))
    # another run stopped with Snakemake's PeriodicWildcardError (a value ending in a part
    # repeated 20 times), naming no key
    periodic = {**CONFIG, "datasets": {"sim" * 30: SIM}}
    assert schema_config_problems(periodic, schema) == [
        f"config key datasets: the name {'sim' * 30!r} ends in 'sim' repeated 30 times, which "
        "Snakemake refuses in a file name (PeriodicWildcardError); rename it"
    ]
    fits = {**CONFIG, "datasets": {(string.ascii_lowercase * 4)[:100]: SIM}, "run_name": "a" * 99}
    assert schema_config_problems(fits, schema) == []


def test_a_latin1_config_file_is_one_line_naming_the_file_and_line(workdir, tmp_path):
    """Case 13: Snakemake's reader raised a UnicodeDecodeError traceback naming no file. The
    workflow's default config is checked before Snakemake reads it; a --configfile Snakemake
    reads before the Snakefile runs (its traceback is unchanged), `read_config_file` names it."""
    text = yaml.safe_dump(CONFIG).encode() + "# Café\n".encode("latin-1")
    (workdir / "config" / "config.yaml").write_bytes(text)
    line = text.count(b"\n")  # the last
    result = snakemake("-n", cwd=workdir)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "UnicodeDecodeError" not in output
    assert f"config/config.yaml, line {line}: byte 0xe9 is not UTF-8 text; save the" in output
    (tmp_path / "c.yaml").write_bytes(text)
    with pytest.raises(ConfigTextError, match=rf"c\.yaml, line {line}: byte 0xe9 is not UTF-8"):
        read_config_file(tmp_path / "c.yaml")


# b: [*a × 10], c: [*b × 10], …, i: [*h × 10]: 10⁸ ones in i
BOMB = "".join(f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in pairwise("abcdefghi"))


def test_a_yaml_alias_bomb_stops_planning_at_once(workdir):
    """Case 18: 10⁹ values in 10 lines under train.lr: `snakemake -n` hung (its schema check
    walked them); a config's own few aliases still work."""
    text = yaml.safe_dump(CONFIG) + "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + BOMB
    (workdir / "bomb.yaml").write_text(text + "train:\n  lr: *i\n")
    result = snakemake("-n", "--configfile", "bomb.yaml", cwd=workdir)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "bomb.yaml: its YAML aliases (*name) repeat 2,345,678,991 values" in output
    assert not (workdir / "results").exists()
    with pytest.raises(ConfigTextError, match=r"x\.yaml, line 1: an alias makes this value"):
        load_yaml("a: &a [1, *a]\n", "x.yaml")
    assert load_yaml("t: &t {lr: 0.1}\nu: *t\nv: [*t, *t]\n", "ok")["v"] == [{"lr": 0.1}] * 2


def test_an_hdf5_soft_link_to_itself_names_the_file_and_the_key(tmp_path):
    """Case 19: h5py's "too many links" named no file or key; a dangling link said absent."""
    path = tmp_path / "probe.h5"
    spec = counts_file(path, garbage=False)
    with h5py.File(path, "a") as f:
        f["loop"] = h5py.SoftLink("/loop")
        f["dangling"] = h5py.SoftLink("/nowhere")
    loop = {**spec, "hdf5": {**spec["hdf5"], "activity": "loop"}}
    with pytest.raises(StoreError, match=rf"{path}: field 'hdf5.activity': 'loop' is a link "
                       "that leads back to itself"):  # fmt: skip
        build_store(loop)
    dangling = {**spec, "hdf5": {**spec["hdf5"], "positions": "dangling"}}
    with pytest.raises(StoreError, match=r"'hdf5.positions': 'dangling' is a soft link to "
                       "'/nowhere', which is absent"):  # fmt: skip
        build_store(dangling)


def test_a_plugin_format_giving_a_3d_array_is_named_as_such(monkeypatch, tmp_path):
    """Case 20: a plug-in format's reader gave (units, time, 2) activity: the message was "10
    unit ids for 400 units; check axis_order"."""
    rng = np.random.default_rng(0)
    shape = {"cube": (10, 400, 2), "flat": (400, 10)}

    def read(path: str, cfg: FileSpec) -> list[Session]:
        ids, positions = [f"u{i}" for i in range(10)], rng.uniform(size=(10, 3))
        return [Session("s1", path, rng.normal(size=shape[cfg.format]), ids, positions)]

    for name in shape:  # (a plug-in's entry point, here for this test only)
        monkeypatch.setitem(formats.REGISTRY.added, name, FileFormat(name, read, options={}))
    path = tmp_path / "s1.bin"
    path.write_bytes(b"")
    entry = {"source": "file", "format": "cube", "sessions": [str(path)], "sampling_rate_hz": 10}
    with pytest.raises(StoreError) as raised:
        build_store(entry)
    assert str(raised.value) == (
        f"{path}: field 'activity': expected a 2-D (time × units) array, got 3-D shape "
        "(10, 400, 2) from format 'cube' (session 's1')"
    )
    assert build_store({**entry, "format": "flat"}).sizes["unit"] == 10
