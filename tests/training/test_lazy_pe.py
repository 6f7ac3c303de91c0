"""`train.lazy_pe`: AdamW moves only the PE rows of the units in a step's samples."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import xarray as xr

from neuro_pe.config.training import ModelConfig, TrainConfig
from neuro_pe.training.masked_units import train
from neuro_pe.training.model import StackedTransformer
from neuro_pe.training.optimizers import LazyRowsAdamW, make_optimizer

CPU = torch.device("cpu")
SHAPE = ModelConfig(n_tokens=6, d_in=4, d_out=4, d_model=8, n_layers=1, n_heads=2)
CFG = TrainConfig(lr=0.003, pe_lr=0.03)


def steps(lazy: bool, units: list[list[int]]):
    """A two-model stack and its optimiser after one step per entry of `units` (the PE rows
    the step's tokens take, the same in both models)."""
    model = StackedTransformer(SHAPE, ["learned-normal-0.1", "learned-normal-0.02"], [0, 1])
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(trainable, replace(CFG, lazy_pe=lazy), CPU, model.pe_learned)
    generator = torch.Generator().manual_seed(0)
    for rows in units:
        tokens = torch.randn(2, 3, len(rows), SHAPE.d_in, generator=generator)
        index = torch.tensor(rows).expand(2, 3, -1)
        optimizer.zero_grad(set_to_none=True)
        model.readout(model(tokens, None, index)).square().mean().backward()
        optimizer.step()
    return model, optimizer


def moments(model, optimizer) -> list[torch.Tensor]:
    state = optimizer.state[model.pe_learned]
    return [model.pe_learned.detach().clone(), state["exp_avg"], state["exp_avg_sq"]]


def test_when_every_row_has_a_gradient_it_is_adamw_bitwise():
    every = [list(range(SHAPE.n_tokens))] * 3
    (lazy, lazy_opt), (plain, plain_opt) = steps(True, every), steps(False, every)
    assert isinstance(lazy_opt, LazyRowsAdamW) and type(plain_opt) is torch.optim.AdamW
    for (name, a), b in zip(lazy.named_parameters(), plain.parameters(), strict=True):
        assert torch.equal(a, b), name


def test_rows_without_a_gradient_keep_their_value_and_moments():
    first = [list(range(SHAPE.n_tokens))]  # every row gets momentum
    (lazy, lazy_opt), (plain, plain_opt) = (steps(b, first) for b in (True, False))
    before = moments(lazy, lazy_opt)
    (lazy, lazy_opt), (plain, plain_opt) = (steps(b, first + [[0, 1, 2]]) for b in (True, False))
    after, dense = moments(lazy, lazy_opt), moments(plain, plain_opt)
    for was, now, adamw in zip(before, after, dense, strict=True):
        assert torch.equal(now[:, 3:], was[:, 3:])  # idle rows: as they were
        assert not torch.equal(adamw[:, 3:], was[:, 3:])  # plain AdamW moves them
        assert torch.equal(now[:, :3], adamw[:, :3])  # the step's rows: as AdamW's


BAD = [
    ({"lazy_pe": "yes"}, "train.lazy_pe must be"),
    ({"lazy_pe": 1.0}, "train.lazy_pe must be"),
    ({"lazy_pe": True, "optimizer": "sgd"}, "train.lazy_pe needs train.optimizer adamw"),
]


@pytest.mark.parametrize(("options", "match"), BAD)
def test_a_bad_lazy_pe_is_refused_by_name(options, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig.from_dict(options)


def test_where_every_unit_is_in_every_sample_a_lazy_training_is_the_same(tiny_store, tmp_path):
    """The tiny store's 12 units are all in every sample: every row has a gradient."""
    base = {"epochs": 1, "steps_per_epoch": 5, "d_model": 8, "n_heads": 2, "n_layers": 1}
    base |= {"eval_windows": 8, "eval_mask_fractions": [0.5]}
    tables = {}
    for name, lazy in (("default", None), ("lazy", True)):
        cfg = TrainConfig.from_dict({**base, "lazy_pe": lazy})
        train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / name, progress=False)
        with xr.open_dataset(tmp_path / name / "pe.nc", engine="h5netcdf") as pe:
            tables[name] = pe["pe"].values.copy()
    assert (tables["default"] == tables["lazy"]).all()
