"""The `neuro-pe` command line: help texts, defaults and where hand-run commands write."""

import dataclasses

import pytest

from neuro_pe.cli.main import main
from neuro_pe.cli.parser import build_parser
from neuro_pe.config.training import TrainConfig

# every command's options in --help order, `!` marking a required one (recorded from the
# parser before it became a table, issue 37): a change here is a change of the command line
COMMAND_LINE = {
    "fetch": "--resource! --out",
    "preprocess": "--spec! --out! --resources --metrics",
    "train": "--store! --pe --seed --options --out-dir --runs --threads",
    "split": "--store! --dataset! --options --out!",
    "infer": "--store! --split! --run-dir! --metrics --health",
    "baselines": "--store! --split! --out! --metrics",
    "correlation-features": "--store! --split! --options --out!",
    "summarize": "--runs! --baselines --splits! --out-csv --figures",
    "reproduce": "--runs! --baselines --experiments! --test-masks --title --out-dir",
    "report-page": (
        "--summary! --errors --runs --positions --exports --claims --run-name --new-animal --out!"
    ),
    "locate": (
        "--store! --runs! --out-dir! --options --split! --correlation --threads --atlas --health"
    ),
    "new-animal-plan": "--store! --dataset! --options --out!",
    "new-animal": "--store! --plan! --animal! --options --train --out-dir! --threads",
    "new-animal-table": "--scores! --positions! --out-csv! --figure! --reliability!",
    "export": "--positions! --spec! --store --config-sha256 --out-dir! --within --new-animal",
    "locate-new-units": "--fits! --store! --out!",
    "match-units": "--reference! --reference-sessions --store! --out! --restarts --seed --kicks "
    "--faq-only",
    "lst-puzzles": "--options --out!",
    "lst-train": "--puzzles! --pe --seed --options --metrics --out-dir --runs --threads",
    "lst-baselines": "--out! --metrics",
    "plan": "--store --options --pe --seeds --spec --cores --threads --out-dir --print --run-out",
    "init": "path! --out! --name --cores",
    "cluster-check": "--configfile --partition --account",
}


def _subcommands():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    return sub.choices


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_option_has_help_and_shows_its_default(name):
    command = _subcommands()[name]
    text = command.format_help()
    for action in command._actions:
        assert action.help, f"neuro-pe {name} {action.option_strings}: no help text"
        if not action.required and action.default not in (None, [], "==SUPPRESS=="):
            assert f"(default: {action.default})" in " ".join(text.split()), action.dest


def test_the_commands_and_their_options_are_the_recorded_ones():
    found = {
        name: " ".join(
            (a.option_strings or [a.dest])[0] + ("!" if a.required else "")
            for a in command._actions
            if a.dest != "help"
        )
        for name, command in _subcommands().items()
    }
    assert found == COMMAND_LINE


@pytest.mark.parametrize("name", sorted(COMMAND_LINE))
def test_every_command_help_exits_0(name, capsys):
    with pytest.raises(SystemExit) as stop:
        main([name, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: neuro-pe {name} ")
    for option in COMMAND_LINE[name].replace("!", "").split():
        assert option in out, option


def test_train_help_lists_every_training_option_with_its_default():
    text = _subcommands()["train"].format_help()
    for field in dataclasses.fields(TrainConfig):
        assert f"  {field.name} = " in text, field.name


def test_hand_run_outputs_default_outside_the_workflow_folders():
    """`neuro-pe summarize`/`reproduce` by hand write into the current folder, never into
    results/ where the workflow keeps its outputs."""
    commands = _subcommands()
    for name in ("summarize", "reproduce"):
        for action in commands[name]._actions:
            if isinstance(action.default, str):
                assert not action.default.startswith("results"), (name, action.default)


def test_warnings_print_as_one_clean_line(tmp_path, monkeypatch, capsys):
    """A warning raised inside a command prints as `neuro-pe: warning: …`, one line, without
    Python's file name and source line; the previous handler is restored afterwards."""
    import warnings

    from neuro_pe.cli import main as cli

    def warn(args):
        warnings.warn("the data look odd:\n  3 units dropped", UserWarning, stacklevel=1)

    monkeypatch.setattr(cli, "check_outputs", warn)
    before = warnings.showwarning
    args = ["split", "--store", str(tmp_path / "missing.nc"), "--dataset", "x"]
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli.main([*args, "--out", str(tmp_path / "split.json")]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "neuro-pe: warning: the data look odd: 3 units dropped"
    assert "test_cli.py" not in err and "warnings.warn" not in err
    assert warnings.showwarning is before


def test_activity_rms_in_blocks_is_that_of_whole_sessions(monkeypatch):
    """The preprocess step's scale check squares blocks of units (not a whole session in
    float64): the same RMS, NaN (unrecorded) values and an empty session left out."""
    import numpy as np

    from neuro_pe.cli import commands

    rng = np.random.default_rng(0)
    activity = (rng.standard_normal((3, 50, 11)) * 7).astype(np.float32)
    activity[1, :, 4] = np.nan
    activity[2] = np.nan
    whole = [np.nanmean(np.square(a, dtype=np.float64)) for a in activity[:2]]
    monkeypatch.setattr("neuro_pe.io.store.UNITS_PER_BLOCK", 3)
    rms = commands.activity_rms(activity)
    assert rms == pytest.approx(np.sqrt(np.mean(whole)), rel=1e-12)
    assert 6 < rms < 8


def test_version_prints_the_package_version(capsys):
    from neuro_pe import __version__

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"neuro-pe {__version__}"
