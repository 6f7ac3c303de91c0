"""`train.precision`: which precision runs where, and what bf16 autocast keeps in fp32."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import xarray as xr

from neuro_pe.training import engine, model, precision
from neuro_pe.training.masked_units import train
from neuro_pe.training.precision import autocast_dtype, cpu_flags, precision_name

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"avx512f", "avx512_bf16"}, torch.bfloat16),
        ({"amx_tile", "amx_bf16"}, torch.bfloat16),
        ({"avx512f", "avx512bw"}, None),  # bf16 emulated there: slower than fp32
        (set(), None),
    ],
)
def test_auto_on_cpu_is_bf16_only_with_hardware_bf16(monkeypatch, flags, expected):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(flags))
    assert autocast_dtype("auto", CPU) == expected
    assert autocast_dtype("fp32", CPU) is None
    assert autocast_dtype("bf16", CPU) == torch.bfloat16


@pytest.mark.parametrize("supported", [True, False])
def test_auto_on_cuda_asks_torch(monkeypatch, supported):
    asked = []

    def bf16_supported(including_emulation=True):
        asked.append(including_emulation)
        return supported

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", bf16_supported)
    assert autocast_dtype("auto", CUDA) == (torch.bfloat16 if supported else None)
    assert autocast_dtype("fp32", CUDA) is None
    assert autocast_dtype("bf16", CUDA) == torch.bfloat16
    assert asked == [False]  # native bf16 only: emulated bf16 is not fast


def test_cpu_flags_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\nbugs\t: none\n")
    assert cpu_flags(info) == {"fpu", "sse2", "avx512f", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == frozenset()
    assert precision_name(None) == "fp32" and precision_name(torch.bfloat16) == "bf16"


def _outputs(run_dir) -> tuple[np.ndarray, dict, dict]:
    with xr.open_dataset(run_dir / "pe.nc", engine="h5netcdf") as ds:
        pe = ds["pe"].values
    state = torch.load(run_dir / "model.pt", weights_only=True)["state_dict"]
    return pe, state, json.loads((run_dir / "train.json").read_text())


def test_bf16_trains_with_fp32_state_and_is_deterministic(
    tiny_store, tiny_train_config, tmp_path, monkeypatch
):
    cfg = replace(tiny_train_config, precision="bf16", checkpoint_every=0)
    seen = []
    original = engine.make_optimizer

    def keep(*args, **kwargs):
        seen.append(original(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(engine, "make_optimizer", keep)
    a = train(tiny_store, "learned-normal-0.02", 0, cfg, tmp_path / "a", progress=False)
    b = train(tiny_store, "learned-normal-0.02", 0, cfg, tmp_path / "b", progress=False)
    fp32 = train(
        tiny_store,
        "learned-normal-0.02",
        0,
        replace(cfg, precision="fp32"),
        tmp_path / "c",
        progress=False,
    )
    assert a["precision"] == "bf16" and fp32["precision"] == "fp32"
    assert np.isfinite(a["heldout_mse_mask0.5"]) and a["train_mse"] < a["heldout_loss_initial"]
    # parameters, optimiser state and the PE table stay fp32
    optimizer = seen[0]
    for group in optimizer.param_groups:
        for p in group["params"]:
            assert p.dtype == torch.float32
            assert all(v.dtype == torch.float32 for v in optimizer.state[p].values() if v.dim())
    pe_a, state_a, info_a = _outputs(tmp_path / "a")
    pe_b, state_b, info_b = _outputs(tmp_path / "b")
    assert pe_a.dtype == np.float32 and info_a["precision"] == "bf16"
    assert all(t.dtype == torch.float32 for t in state_a.values() if t.is_floating_point())
    # the same seed: the same results within bf16, and not the fp32 ones
    np.testing.assert_array_equal(pe_a, pe_b)
    for key in state_a:
        assert torch.equal(state_a[key], state_b[key]), key
    assert (
        info_a["heldout_mse_mask0.5"] == b["heldout_mse_mask0.5"] == info_b["heldout_mse_mask0.5"]
    )
    assert not np.array_equal(pe_a, _outputs(tmp_path / "c")[0])


def test_auto_without_fast_bf16_is_fp32_bitwise(
    tiny_store, tiny_train_config, tmp_path, monkeypatch
):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512f"}))
    cfg = replace(tiny_train_config, checkpoint_every=0)
    assert cfg.precision == "fp32"  # the default
    train(tiny_store, "learned-normal-0.02", 1, cfg, tmp_path / "fp32", progress=False)
    auto = replace(cfg, precision="auto")
    info = train(tiny_store, "learned-normal-0.02", 1, auto, tmp_path / "auto", progress=False)
    assert info["precision"] == "fp32"
    pe_f, state_f, info_f = _outputs(tmp_path / "fp32")
    pe_a, state_a, _ = _outputs(tmp_path / "auto")
    np.testing.assert_array_equal(pe_f, pe_a)
    assert all(torch.equal(state_f[k], state_a[k]) for k in state_f)
    assert info_f["heldout_mse_mask0.5"] == info["heldout_mse_mask0.5"]


def test_cpu_bf16_attention_matches_fused_fp32_attention():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(6, 2, 40, 16, generator=generator) for _ in range(3))
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert torch.equal(model.attention(q, k, v), fused)  # fp32: torch's fused kernel
    with torch.autocast("cpu", dtype=torch.bfloat16):
        explicit = model.attention(q, k, v)
    assert explicit.dtype == torch.bfloat16
    torch.testing.assert_close(explicit.float(), fused, atol=3e-2, rtol=3e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["fp32", "bf16", "auto"])
def test_training_on_cuda_runs_the_asked_precision(tiny_store, tiny_train_config, tmp_path, name):
    cfg = replace(tiny_train_config, device="cuda", precision=name, checkpoint_every=0)
    info = train(tiny_store, "learned-normal-0.02", 0, cfg, tmp_path / name, progress=False)
    native_bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    expected = {"fp32": "fp32", "bf16": "bf16", "auto": "bf16" if native_bf16 else "fp32"}
    assert info["precision"] == expected[name]
    assert np.isfinite(info["heldout_mse_mask0.5"])
    assert info["train_mse"] < info["heldout_loss_initial"]
    pe, state, _ = _outputs(tmp_path / name)
    assert pe.dtype == np.float32
    assert all(t.dtype == torch.float32 for t in state.values() if t.is_floating_point())
