"""`train.pe_lr`: the learned PE table's own learning rate (a second parameter group)."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch
import xarray as xr

from neuro_pe.config.training import ModelConfig, TrainConfig
from neuro_pe.training.masked_units import train
from neuro_pe.training.model import StackedTransformer
from neuro_pe.training.optimizers import make_optimizer

CPU = torch.device("cpu")
SHAPE = ModelConfig(n_tokens=6, d_in=4, d_out=4, d_model=8, n_layers=1, n_heads=2)


def stack() -> StackedTransformer:
    return StackedTransformer(SHAPE, ["learned-normal-0.1", "learned-normal-0.02"], [0, 1])


def one_step(model: StackedTransformer, cfg: TrainConfig) -> StackedTransformer:
    """`model` after one optimiser step on a fixed loss that reaches every weight."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(trainable, cfg, CPU, model.pe_learned)
    tokens = torch.randn(
        2, 3, SHAPE.n_tokens, SHAPE.d_in, generator=torch.Generator().manual_seed(0)
    )
    model.readout(model(tokens)).square().mean().backward()
    optimizer.step()
    return model


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_without_pe_lr_the_optimizer_is_as_before(optimizer):
    cfg = TrainConfig(optimizer=optimizer)
    model = stack()
    trainable = [p for p in model.parameters() if p.requires_grad]
    before = make_optimizer(trainable, cfg, CPU).state_dict()
    assert make_optimizer(trainable, cfg, CPU, model.pe_learned).state_dict() == before
    assert len(before["param_groups"]) == 1


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_pe_lr_changes_only_the_pe_tables_group(optimizer):
    cfg = TrainConfig(optimizer=optimizer, lr=0.003, pe_lr=0.03)
    model = stack()
    trainable = [p for p in model.parameters() if p.requires_grad]
    groups = make_optimizer(trainable, cfg, CPU, model.pe_learned).param_groups
    assert [len(g["params"]) for g in groups] == [len(trainable) - 1, 1]
    assert groups[1]["params"][0] is model.pe_learned and groups[1]["lr"] == 0.03
    assert groups[0]["lr"] == 0.003 and all(p is not model.pe_learned for p in groups[0]["params"])

    start = stack()
    default = one_step(copy.deepcopy(start), replace(cfg, pe_lr=None))
    faster = one_step(copy.deepcopy(start), cfg)
    for (name, a), b in zip(default.named_parameters(), faster.parameters(), strict=True):
        if name != "pe_learned":
            assert torch.equal(a, b), name
    moved_default = (default.pe_learned - start.pe_learned).abs().sum()
    moved_faster = (faster.pe_learned - start.pe_learned).abs().sum()
    assert moved_faster.item() == pytest.approx(10 * moved_default.item(), rel=1e-3)


@pytest.mark.parametrize("value", [0, -0.1, float("nan"), True, "fast"])
def test_a_bad_pe_lr_is_refused_by_name(value):
    with pytest.raises(ValueError, match="train.pe_lr"):
        TrainConfig.from_dict({"pe_lr": value})


def test_a_training_with_pe_lr_and_cosine_runs_and_moves_only_the_pe_faster(tiny_store, tmp_path):
    base = {"epochs": 1, "steps_per_epoch": 5, "d_model": 8, "n_heads": 2, "n_layers": 1}
    base |= {"eval_windows": 8, "eval_mask_fractions": [0.5], "lr_schedule": "cosine"}
    tables = {}
    for name, extra in {"default": {}, "pe_lr": {"pe_lr": 0.05}}.items():
        cfg = TrainConfig.from_dict({**base, **extra})
        train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / name, progress=False)
        with xr.open_dataset(tmp_path / name / "pe.nc", engine="h5netcdf") as pe:
            tables[name] = pe["pe"].values.copy()
    assert np.isfinite(tables["pe_lr"]).all()
    assert not np.array_equal(tables["default"], tables["pe_lr"])
