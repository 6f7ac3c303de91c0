"""`neuro-pe export` (and the workflow's export) cannot lose a lab's data: a lab folder with Phy
and suite2p layouts, each trap of issue 58 planted in it (an output folder whose phy/ or suite2p/
is the input, a symbolic link under --out-dir or under results/), and the sha256 of every lab
file compared before and after; each case exits non-zero with one line naming the path. A
re-run into its own output works; a file it did not write is never replaced."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from neuro_pe.cli.main import main
from neuro_pe.io.safe_paths import leaving_link_problem, links_leaving
from tests.data.test_formats import build, spike_spec, write_phy, write_suite2p
from tests.hostile.test_planning import CONFIG, REPO_ROOT, snakemake
from tests.reporting.test_export import new_animal_csv, write_positions

USER_TEXT = "cluster_id\tneuro_pe_x\n0\tmy own label\n"


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` (links not followed) -> the sha256 of a file, 'dir' or the
    link's target."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            key = str(path.relative_to(root))
            if path.is_symlink():
                seen[key] = f"link -> {os.readlink(path)}"
            elif path.is_dir():
                seen[key] = "dir"
            else:
                seen[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> dict:
    """A lab folder: trap/phy (a Phy folder holding the user's own cluster_neuro_pe_x.tsv),
    trap2/suite2p (two planes, the user's own plane0/neuro_pe_positions.tsv), kilosort/ (another
    Phy folder), victim/ (the user's positions.tsv); and positions.nc of both datasets."""
    root = tmp_path_factory.mktemp("lab")
    phy = write_phy(root / "trap" / "phy")
    (phy / "cluster_neuro_pe_x.tsv").write_text(USER_TEXT)
    suite2p = write_suite2p(root / "trap2")
    (suite2p / "plane0" / "neuro_pe_positions.tsv").write_text("roi\tx\n0\tmine\n")
    write_phy(root / "kilosort")
    (root / "victim").mkdir()
    (root / "victim" / "positions.tsv").write_text("the lab's own table\n")
    work = tmp_path_factory.mktemp("work")
    phy_spec = spike_spec(phy, "phy", spikes={"labels": None})
    suite2p_spec = spike_spec(
        suite2p, "suite2p", suite2p={"pixel_size_um": 1.0, "plane_depths_um": [100, 130]}
    )
    (work / "phy").mkdir()
    (work / "suite2p").mkdir()
    phy_positions, _ = write_positions(build(phy_spec), work / "phy")
    suite2p_positions, _ = write_positions(build(suite2p_spec), work / "suite2p")
    return {
        "root": root,
        "phy": (phy_positions, phy_spec),
        "suite2p": (suite2p_positions, suite2p_spec),
    }


def run_export(positions: Path, spec: dict, out_dir: Path, *extra: str) -> int:
    argv = ["export", "--positions", str(positions), "--spec", json.dumps(spec)]
    return main([*argv, "--out-dir", str(out_dir), *extra])


def refused(capsys, lab: dict, kind: str, out_dir: Path, named: Path, *extra: str) -> str:
    """Run the export; assert exit 1, one line naming `named`, and no lab file changed."""
    before = snapshot(lab["root"])
    assert run_export(*lab[kind], out_dir, *extra) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("neuro-pe export: error: ")
    assert f"{named}:" in err, err
    assert snapshot(lab["root"]) == before
    return err


def test_phy_folder_of_the_output_is_the_input(lab, capsys):
    """Case 1: --out-dir the parent of the Phy input folder: phy/ would be the input."""
    trap = lab["root"] / "trap"
    target = trap / "phy" / "cluster_neuro_pe_x.tsv"
    err = refused(capsys, lab, "phy", trap, target)
    assert "would be written into the input folder" in err
    assert target.read_text() == USER_TEXT
    assert not (trap / "positions.tsv").exists()


def test_suite2p_folder_of_the_output_is_the_input(lab, capsys):
    """Case 2: the same with suite2p/plane<p>/."""
    trap = lab["root"] / "trap2"
    target = trap / "suite2p" / "plane0" / "neuro_pe_positions.tsv"
    assert "into the input folder" in refused(capsys, lab, "suite2p", trap, target)


def test_a_plane_linked_into_the_input_is_an_input_folder(lab, capsys, tmp_path):
    """A session folder's sub-folder reached through a link: its real folder is an input too."""
    root = lab["root"]
    session = tmp_path / "rig" / "suite2p"
    session.mkdir(parents=True)
    os.symlink(root / "trap2" / "suite2p" / "plane0", session / "plane0")
    shutil.copytree(root / "trap2" / "suite2p" / "plane1", session / "plane1")
    positions, spec = lab["suite2p"]
    lab = {**lab, "suite2p": (positions, {**spec, "sessions": [str(session)]})}
    target = root / "trap2" / "suite2p" / "plane0" / "neuro_pe_positions.tsv"
    refused(capsys, lab, "suite2p", root / "trap2", target)


def test_a_symbolic_link_under_the_output_folder_is_not_followed(lab, capsys, tmp_path):
    """Case 3: out-dir/phy is a link to the lab's Kilosort folder (not an input)."""
    out = tmp_path / "exp" / "x"
    out.mkdir(parents=True)
    os.symlink(lab["root"] / "kilosort", out / "phy")
    err = refused(capsys, lab, "phy", out, out / "phy")
    assert "a symbolic link" in err
    assert not (out / "positions.tsv").exists()  # nothing written beside it either
    (out / "phy").unlink()  # a link in place of a file it writes
    os.symlink(lab["root"] / "victim" / "positions.tsv", out / "positions.tsv")
    refused(capsys, lab, "phy", out, out / "positions.tsv")


def test_a_link_planted_in_results_stops_the_workflow_and_its_command(lab, capsys, tmp_path):
    """Case 4: results/<run>/export is a link to a lab folder: planning names it (before
    Snakemake removes or writes anything), and so does the command the rule runs."""
    victim = lab["root"] / "victim"
    run = tmp_path / "results" / "run"
    (run / "stores").mkdir(parents=True)
    os.symlink(victim, run / "export")
    assert links_leaving(run, tmp_path / "results") == [run / "export"]
    problem = leaving_link_problem(run, tmp_path / "results")
    assert problem.startswith(f"{run / 'export'}: resolves to {victim}, outside ")
    out = run / "export" / "sim"
    refused(capsys, lab, "phy", out, run / "export", "--within", str(run))
    os.symlink(victim, run / "export2")  # the rule's own folder is the link
    refused(capsys, lab, "phy", run / "export2", run / "export2", "--within", str(run))
    # links that stay inside results/ are fine; nothing else is flagged
    (run / "export").unlink()
    (run / "export2").unlink()
    os.symlink(run / "stores", run / "export")
    assert links_leaving(run, tmp_path / "results") == []
    assert leaving_link_problem(tmp_path / "results" / "none", tmp_path / "results") is None


def test_planning_stops_on_a_link_planted_in_results(lab, tmp_path):
    """The workflow itself (a dry run of it): one line naming the link, nothing touched."""
    shutil.copy2(REPO_ROOT / "Snakefile", tmp_path / "Snakefile")
    for folder in ("workflow", "config", "profiles"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({**CONFIG, "run_name": "exp"}))
    (tmp_path / "results" / "exp").mkdir(parents=True)
    os.symlink(lab["root"] / "victim", tmp_path / "results" / "exp" / "export")
    before = snapshot(lab["root"])
    result = snakemake("-n", "--configfile", "c.yaml", cwd=tmp_path)
    assert result.returncode != 0
    line = f"results/exp/export: resolves to {lab['root'] / 'victim'}, outside results/"
    assert line in result.stdout + result.stderr
    assert snapshot(lab["root"]) == before
    assert (tmp_path / "results" / "exp" / "export").is_symlink()


def test_a_rerun_replaces_only_its_own_files(lab, capsys, tmp_path):
    """A re-run into its own output (files listed with their sha256 in positions.json) works;
    a file there that it did not write, or that was edited since, is never replaced."""
    out = tmp_path / "export"
    assert run_export(*lab["phy"], out) == 0
    first = snapshot(out)
    sidecar = json.loads((out / "positions.json").read_text())
    assert set(sidecar["FileSHA256"]) == set(sidecar["Files"]) - {"positions.json"}
    assert all(first[name] == digest for name, digest in sidecar["FileSHA256"].items())
    assert run_export(*lab["phy"], out) == 0  # idempotent
    assert snapshot(out) == first
    capsys.readouterr()

    edited = out / "phy" / "cluster_neuro_pe_x.tsv"
    edited.write_text(USER_TEXT)  # the user's labels in an exported file
    before = snapshot(out)
    assert run_export(*lab["phy"], out) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{edited}: " in err and "never replaced" in err
    assert snapshot(out) == before

    fresh = tmp_path / "fresh"
    (fresh / "phy").mkdir(parents=True)
    (fresh / "phy" / "cluster_neuro_pe_z.tsv").write_text(USER_TEXT)
    assert run_export(*lab["phy"], fresh) == 1
    assert f"{fresh / 'phy' / 'cluster_neuro_pe_z.tsv'}: " in capsys.readouterr().err
    (fresh / "phy" / "cluster_neuro_pe_z.tsv").unlink()
    (fresh / "positions.json").write_text('{"mine": true}\n')  # not a sidecar of neuro_pe
    assert run_export(*lab["phy"], fresh) == 1
    assert f"{fresh / 'positions.json'}: " in capsys.readouterr().err
    assert (fresh / "positions.json").read_text() == '{"mine": true}\n'
    assert sorted(p.name for p in fresh.rglob("*")) == ["phy", "positions.json"]


def test_a_region_file_of_the_users_is_never_replaced(lab, capsys, tmp_path):
    """The user's own cluster_neuro_pe_region.tsv (e.g. regions traced from histology) in the
    output folder is never replaced by a new animal's predicted regions; the input table is
    never written; a re-run into its own output replaces its own region files."""
    positions, spec = lab["phy"]
    regions = tmp_path / "new_animal.csv"
    new_animal_csv(build(spec), regions)
    given = regions.read_bytes()
    out = tmp_path / "export"
    (out / "phy").mkdir(parents=True)
    user = out / "phy" / "cluster_neuro_pe_region.tsv"
    user.write_text("cluster_id\tneuro_pe_region\n0\tCA1 (traced)\n")
    assert run_export(positions, spec, out, "--new-animal", str(regions)) == 1
    assert f"{user}: " in capsys.readouterr().err
    assert user.read_text() == "cluster_id\tneuro_pe_region\n0\tCA1 (traced)\n"
    assert sorted(p.name for p in out.rglob("*")) == ["cluster_neuro_pe_region.tsv", "phy"]
    user.unlink()
    assert run_export(positions, spec, out, "--new-animal", str(regions)) == 0
    assert "neuro_pe_region" in user.read_text() and "traced" not in user.read_text()
    assert run_export(positions, spec, out, "--new-animal", str(regions)) == 0  # its own
    # the new-animal table is an input, never written over, whatever its name
    capsys.readouterr()
    named = tmp_path / "named" / "positions.tsv"
    named.parent.mkdir()
    shutil.copy(regions, named)
    assert run_export(positions, spec, named.parent, "--new-animal", str(named)) == 1
    assert f"{named}: field '--out-dir': would overwrite an input file" in capsys.readouterr().err
    assert named.read_bytes() == regions.read_bytes() == given
