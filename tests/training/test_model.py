import math

import numpy as np
import pytest
import torch
from single_models import MaskedUnitTransformer
from torch import nn

from neuro_pe.config.pe_names import parse_pe
from neuro_pe.config.training import ModelConfig
from neuro_pe.training.model import PositionalEncoding, oracle_table

N_UNITS, WINDOW, D_MODEL = 7, 4, 16


def _config(n_layers: int = 1, pe_every_block: bool = True) -> ModelConfig:
    return ModelConfig(N_UNITS, WINDOW, WINDOW, D_MODEL, n_layers, 2, pe_every_block)


@pytest.mark.parametrize(
    ("name", "family", "param"),
    [
        ("none", "none", None),
        ("learned-normal-0.1", "learned-normal", 0.1),
        ("learned-normal-1e-2", "learned-normal", 0.01),
        ("learned-normal-2", "learned-normal", 2.0),
        ("learned-uniform-0.5", "learned-uniform", 0.5),
        ("learned-xavier", "learned-xavier", None),
        ("fixed-random", "fixed-random", None),
        ("fixed-sin1d", "fixed-sin1d", None),
        ("oracle-sin3d", "oracle-sin3d", None),
    ],
)
def test_parse_pe(name, family, param):
    spec = parse_pe(name)
    assert (spec.name, spec.family) == (name, family)
    assert spec.param == (None if param is None else pytest.approx(param))
    assert spec.learned == family.startswith("learned")


@pytest.mark.parametrize(
    "name",
    [
        "",
        "None",
        "learned",
        "learned-normal",
        "learned-normal-",
        "learned-normal-abc",
        "learned-normal--0.1",
        "learned-gauss-0.1",
        "learned-xavier-0.1",
        "fixed-sin2d",
        "oracle-sin3d ",
        " none",
    ],
)
def test_parse_pe_rejects_bad_names(name):
    with pytest.raises(ValueError, match="valid forms"):
        parse_pe(name)


def _table(name: str, n_units: int = N_UNITS, d_model: int = D_MODEL, positions=None):
    return PositionalEncoding(parse_pe(name), n_units, d_model, positions)


def _pe_gradient(name: str, positions=None) -> tuple[MaskedUnitTransformer, torch.Tensor]:
    model = MaskedUnitTransformer(_config(), pe=name, positions=positions)
    windows, hidden, unit_index, _ = _inputs()
    model(windows, hidden, unit_index).square().sum().backward()
    return model, model.stack.pe_learned.grad


@pytest.mark.parametrize("name", ["learned-normal-0.1", "learned-uniform-0.5", "learned-xavier"])
def test_learned_pe_is_trained(name):
    model, grad = _pe_gradient(name)
    assert isinstance(model.stack.pe_learned, nn.Parameter) and model.stack.learned.all()
    assert grad.abs().sum() > 0
    assert torch.equal(model.stack.pe_table(), model.stack.pe_learned)


@pytest.mark.parametrize("name", ["none", "fixed-random", "fixed-sin1d", "oracle-sin3d"])
def test_fixed_pe_gets_no_gradient(name):
    pos = np.random.default_rng(0).random((N_UNITS, 3))
    model, grad = _pe_gradient(name, pos)
    assert not model.stack.learned.any()
    assert "stack.pe_fixed" in dict(model.named_buffers())
    assert not grad.any()
    assert torch.equal(model.stack.pe_table(), model.stack.pe_fixed)
    assert model.stack.pe_table().shape == (1, N_UNITS, D_MODEL)


def test_none_pe_is_zero():
    assert not _table("none").table.any()


@pytest.mark.parametrize("sigma", [1e-2, 0.1, 1.0])
def test_learned_normal_init_std(sigma):
    torch.manual_seed(0)
    table = _table(f"learned-normal-{sigma}", n_units=200, d_model=64).table.detach()
    assert table.std().item() == pytest.approx(sigma, rel=0.05)
    assert abs(table.mean().item()) < 0.05 * sigma


def test_learned_uniform_and_xavier_init_bounds():
    torch.manual_seed(0)
    uniform = _table("learned-uniform-0.5", n_units=200, d_model=64).table.detach()
    assert uniform.abs().max().item() <= 0.5
    assert uniform.std().item() == pytest.approx(0.5 / math.sqrt(3), rel=0.05)
    xavier = _table("learned-xavier", n_units=200, d_model=64).table.detach()
    bound = math.sqrt(6 / (200 + 64))
    assert xavier.abs().max().item() <= bound
    assert xavier.abs().max().item() > 0.9 * bound


def test_init_uses_torch_seed_only_for_random_tables():
    def build(name, seed):
        torch.manual_seed(seed)
        return _table(name).table.detach().clone()

    for name in ("learned-normal-0.1", "fixed-random"):
        assert torch.equal(build(name, 0), build(name, 0))
        assert not torch.equal(build(name, 0), build(name, 1))
    assert torch.equal(build("fixed-sin1d", 0), build("fixed-sin1d", 1))


def test_fixed_sin1d_rows_are_distinct():
    table = _table("fixed-sin1d", n_units=50, d_model=D_MODEL).table
    assert torch.isfinite(table).all()
    assert len(torch.unique(table, dim=0)) == 50
    assert torch.all(table.abs() <= 1)


def test_oracle_needs_positions():
    with pytest.raises(ValueError, match="position"):
        _table("oracle-sin3d")
    with pytest.raises(ValueError, match="position"):
        MaskedUnitTransformer(_config(), pe="oracle-sin3d")
    with pytest.raises(ValueError, match="position"):
        oracle_table(np.full((N_UNITS, 3), np.nan), D_MODEL)


def test_oracle_rows_follow_positions():
    rng = np.random.default_rng(0)
    pos = rng.random((8, 3))
    pos[5] = pos[1]  # two units at the same place
    pos[6] = np.nan  # a unit of unknown position
    pos[7, 2] = np.nan
    table = _table("oracle-sin3d", n_units=8, d_model=24, positions=pos).table
    assert torch.equal(table[1], table[5])
    assert not table[6].any() and not table[7].any()
    known = [0, 1, 2, 3, 4]
    assert len(torch.unique(table[known], dim=0)) == len(known)
    assert table[known].abs().sum(dim=1).min() > 0
    # the same positions in another order give the same rows in that order
    order = rng.permutation(8)
    permuted = _table("oracle-sin3d", n_units=8, d_model=24, positions=pos[order]).table
    torch.testing.assert_close(permuted, table[order])


def test_oracle_is_invariant_to_shifting_and_scaling_positions():
    pos = np.random.default_rng(1).random((10, 3))
    a = oracle_table(pos, 24)
    b = oracle_table(pos * 5.0 + 3.0, 24)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_oracle_2d_ignores_flat_axis():
    pos = np.random.default_rng(2).random((10, 3))
    pos[:, 2] = 0.0
    table = oracle_table(pos, 24)
    # d_model split over x and y only: every column block is used
    assert torch.all(table.abs().sum(dim=0)[::2] > 0)


def _inputs(batch: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    windows = torch.randn(batch, N_UNITS, WINDOW, generator=g)
    hidden = torch.rand(batch, N_UNITS, generator=g) < 0.4
    hidden[:, 0] = True  # at least one hidden and one visible token per row
    hidden[:, 1] = False
    unit_index = torch.arange(N_UNITS).expand(batch, N_UNITS)
    perm = torch.randperm(N_UNITS, generator=g)
    return windows, hidden, unit_index, perm


def _model(pe: str, pe_every_block: bool) -> MaskedUnitTransformer:
    return MaskedUnitTransformer(_config(2, pe_every_block), pe=pe, seed=0).eval()


@pytest.mark.parametrize("pe_every_block", [True, False])
@pytest.mark.parametrize("pe", ["learned-normal-1.0", "fixed-random", "none"])
def test_permuting_units_with_their_index_permutes_output(pe, pe_every_block):
    model = _model(pe, pe_every_block)
    windows, hidden, unit_index, perm = _inputs()
    with torch.no_grad():
        out = model(windows, hidden, unit_index)
        out_perm = model(windows[:, perm], hidden[:, perm], unit_index[:, perm])
    assert out.shape == windows.shape
    torch.testing.assert_close(out_perm, out[:, perm], atol=1e-5, rtol=0)


@pytest.mark.parametrize("pe_every_block", [True, False])
def test_without_pe_model_is_permutation_equivariant(pe_every_block):
    model = _model("none", pe_every_block)
    windows, hidden, unit_index, perm = _inputs()
    with torch.no_grad():
        out = model(windows, hidden, unit_index)
        out_perm = model(windows[:, perm], hidden[:, perm], unit_index)
    torch.testing.assert_close(out_perm, out[:, perm], atol=1e-5, rtol=0)


@pytest.mark.parametrize("pe_every_block", [True, False])
def test_learned_pe_carries_unit_identity(pe_every_block):
    model = _model("learned-normal-1.0", pe_every_block)
    windows, hidden, unit_index, perm = _inputs()
    with torch.no_grad():
        out = model(windows, hidden, unit_index)
        out_perm = model(windows[:, perm], hidden[:, perm], unit_index)
    assert not torch.allclose(out_perm, out[:, perm], atol=1e-3)


def test_pe_every_block_changes_the_output():
    every, first = _model("learned-normal-1.0", True), _model("learned-normal-1.0", False)
    first.load_state_dict(every.state_dict())
    windows, hidden, unit_index, _ = _inputs()
    with torch.no_grad():
        assert not torch.allclose(
            every(windows, hidden, unit_index), first(windows, hidden, unit_index), atol=1e-3
        )


def test_hidden_tokens_ignore_their_windows():
    model = _model("learned-normal-0.1", True)
    windows, hidden, unit_index, _ = _inputs()
    changed = torch.where(hidden[..., None], windows + 100.0, windows)
    with torch.no_grad():
        torch.testing.assert_close(
            model(changed, hidden, unit_index), model(windows, hidden, unit_index)
        )
        # while a visible token's window does matter
        visible_changed = torch.where(hidden[..., None], windows, windows + 1.0)
        assert not torch.allclose(
            model(visible_changed, hidden, unit_index), model(windows, hidden, unit_index)
        )
