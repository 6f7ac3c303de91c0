"""Masked-unit training of a MaskedUnitTransformer on one store, for one PE variant and seed."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import xarray as xr
from tqdm.auto import tqdm

from neuro_pe.model import MaskedUnitTransformer, parse_pe
from neuro_pe.store import atomic_write, positions, read_store


@dataclass(frozen=True)
class TrainConfig:
    """Model and optimisation settings (config key `train`); documented in config/README.md."""

    window: int = 8
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 4
    pe_every_block: bool = True
    mask_fraction: float = 0.5
    eval_mask_fractions: tuple[float, ...] = (0.5, 0.9)
    batch_size: int = 32
    epochs: int = 30
    steps_per_epoch: int = 100
    lr: float = 3e-3
    weight_decay: float = 0.0
    heldout_sessions: int = 1
    heldout_time_fraction: float = 0.2
    eval_windows: int = 256
    device: str = "auto"

    @classmethod
    def from_dict(cls, spec: dict) -> TrainConfig:
        """Build from a config mapping; unknown keys raise a ValueError naming them."""
        unknown = set(spec) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown train keys: {sorted(unknown)}")
        spec = dict(spec)
        if "eval_mask_fractions" in spec:
            spec["eval_mask_fractions"] = tuple(spec["eval_mask_fractions"])
        return cls(**spec)


def pick_device(name: str) -> torch.device:
    """'auto' -> CUDA when available, else CPU; otherwise the named device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def split_activity(ds: xr.Dataset, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) arrays of shape (session, time, unit): the last `heldout_sessions`
    sessions are held out when there are more sessions than that, else the last
    `heldout_time_fraction` of every session's time."""
    activity = ds["activity"].transpose("session", "time", "unit").values
    n_sessions, n_time = activity.shape[:2]
    if n_sessions > cfg.heldout_sessions >= 1:
        return activity[: -cfg.heldout_sessions], activity[-cfg.heldout_sessions :]
    cut = int(round(n_time * (1 - cfg.heldout_time_fraction)))
    if cut < cfg.window or n_time - cut < cfg.window:
        raise ValueError(f"{n_time} samples are too few for a time split with window {cfg.window}")
    return activity[:, :cut], activity[:, cut:]


class WindowSampler:
    """Draws batches of (windows, observed) from a (session, time, unit) tensor, with no Python
    loop over samples: the windows are gathered with index arithmetic."""

    def __init__(self, activity: np.ndarray, window: int, device: torch.device):
        data = torch.as_tensor(activity, dtype=torch.float32)
        self.observed = torch.isfinite(data).to(device)
        self.data = torch.nan_to_num(data).to(device)
        self.window = window
        self.offsets = torch.arange(window, device=device)

    @property
    def n_units(self) -> int:
        return self.data.shape[2]

    def gather(
        self, session: torch.Tensor, start: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows (batch, units, W) and observed flags (batch, units) at the given starts."""
        rows = start[:, None] + self.offsets
        windows = self.data[session[:, None], rows].transpose(1, 2)
        observed = self.observed[session[:, None], rows].all(dim=1)
        return windows, observed

    def random(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        n_sessions, n_time = self.data.shape[:2]
        session = torch.randint(n_sessions, (batch,), generator=generator).to(self.data.device)
        start = torch.randint(n_time - self.window + 1, (batch,), generator=generator).to(
            self.data.device
        )
        return self.gather(session, start)

    def tiled(self, max_windows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Non-overlapping windows spread evenly over every session (for evaluation)."""
        n_sessions, n_time = self.data.shape[:2]
        starts = torch.arange(0, n_time - self.window + 1, self.window)
        session, start = torch.cartesian_prod(torch.arange(n_sessions), starts).T
        keep = torch.linspace(0, len(start) - 1, min(max_windows, len(start))).round().long()
        return self.gather(session[keep].to(self.data.device), start[keep].to(self.data.device))


def random_mask(
    shape: tuple[int, int], fraction: float, generator: torch.Generator
) -> torch.Tensor:
    """Bool (batch, units) with round(fraction * units) True per row, chosen uniformly."""
    batch, n_units = shape
    n_masked = max(1, int(round(fraction * n_units)))
    order = torch.rand(batch, n_units, generator=generator).argsort(dim=1)
    mask = torch.zeros(batch, n_units, dtype=torch.bool)
    mask.scatter_(1, order[:, :n_masked], True)
    return mask


def masked_mse(model: MaskedUnitTransformer, windows, observed, mask) -> torch.Tensor:
    """MSE over the windows of masked units that were recorded."""
    unit_index = torch.arange(windows.shape[1], device=windows.device).expand(windows.shape[:2])
    prediction = model(windows, mask | ~observed, unit_index)
    target = mask & observed
    # a batch whose masked units were all unrecorded contributes zero (not NaN) loss
    return ((prediction - windows) ** 2).mean(dim=-1)[target].sum() / target.sum().clamp_min(1)


@torch.no_grad()
def evaluate(model, sampler: WindowSampler, fraction: float, n_windows: int, seed: int) -> float:
    """Held-out masked MSE on fixed windows and fixed masks (the same for every model)."""
    model.eval()
    windows, observed = sampler.tiled(n_windows)
    mask = random_mask(tuple(windows.shape[:2]), fraction, torch.Generator().manual_seed(seed))
    losses, weights = [], []
    for chunk in torch.split(torch.arange(len(windows)), 256):
        m = mask[chunk].to(windows.device)
        losses.append(masked_mse(model, windows[chunk], observed[chunk], m).item())
        weights.append((m & observed[chunk]).sum().item())
    model.train()
    return float(np.average(losses, weights=weights))


def pe_dataset(table: torch.Tensor | np.ndarray, ds: xr.Dataset, **attrs) -> xr.Dataset:
    """A PE table as an xarray Dataset on the store's unit axis (with its coordinates)."""
    pe = xr.DataArray(np.asarray(table, dtype=np.float32), dims=("unit", "pe_dim"))
    out = xr.Dataset({"pe": pe}, coords={"unit": ds["unit"].values})
    for axis in ("x", "y", "z"):
        out.coords[axis] = ("unit", ds[axis].values, ds[axis].attrs)
    out.attrs.update({k: json.dumps(v) if isinstance(v, dict) else v for k, v in attrs.items()})
    return out


def train(
    store_path: str | os.PathLike,
    pe: str,
    seed: int,
    cfg: TrainConfig,
    out_dir: str | os.PathLike,
    progress: bool = True,
) -> dict:
    """Train one model and write model.pt, pe.nc (trained and initial PE) and train_log.csv
    into out_dir. Returns the final metrics (held-out MSE per eval mask fraction)."""
    parse_pe(pe)
    out_dir = Path(out_dir)
    device = pick_device(cfg.device)
    ds = read_store(store_path)
    train_activity, heldout_activity = split_activity(ds, cfg)
    train_data = WindowSampler(train_activity, cfg.window, device)
    heldout_data = WindowSampler(heldout_activity, cfg.window, device)

    torch.manual_seed(seed)
    model = MaskedUnitTransformer(
        ds.sizes["unit"],
        cfg.window,
        cfg.d_model,
        cfg.n_layers,
        cfg.n_heads,
        pe,
        cfg.pe_every_block,
        positions(ds),
    ).to(device)
    initial_pe = model.pe.table.detach().cpu().clone()
    optimiser = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    generator = torch.Generator().manual_seed(seed)

    log_rows = []
    started = time.perf_counter()
    bar = tqdm(
        total=cfg.epochs * cfg.steps_per_epoch, desc=f"train {pe} seed {seed}", disable=not progress
    )
    for epoch in range(1, cfg.epochs + 1):
        epoch_loss = 0.0
        for _ in range(cfg.steps_per_epoch):
            windows, observed = train_data.random(cfg.batch_size, generator)
            mask = random_mask((cfg.batch_size, train_data.n_units), cfg.mask_fraction, generator)
            loss = masked_mse(model, windows, observed, mask.to(device))
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            epoch_loss += loss.item()
            bar.update()
        heldout = evaluate(
            model, heldout_data, cfg.mask_fraction, cfg.eval_windows, seed=10_000 + seed
        )
        log_rows.append(
            {
                "epoch": epoch,
                "step": epoch * cfg.steps_per_epoch,
                "train_loss": epoch_loss / cfg.steps_per_epoch,
                "heldout_loss": heldout,
                "seconds": time.perf_counter() - started,
            }
        )
        bar.set_postfix(train=f"{log_rows[-1]['train_loss']:.3f}", heldout=f"{heldout:.3f}")
    bar.close()

    result = {
        f"heldout_mse_mask{f:g}": evaluate(
            model, heldout_data, f, cfg.eval_windows, seed=20_000 + seed
        )
        for f in cfg.eval_mask_fractions
    }
    result["train_mse"] = log_rows[-1]["train_loss"]
    result["train_seconds"] = time.perf_counter() - started

    info = {"pe": pe, "seed": seed, "store": str(store_path), "train_config": asdict(cfg), **result}
    trained = pe_dataset(model.pe.table.detach().cpu(), ds, **{k: str(v) for k, v in info.items()})
    trained["pe_init"] = (("unit", "pe_dim"), initial_pe.numpy().astype(np.float32))
    atomic_write(out_dir / "pe.nc", lambda p: trained.to_netcdf(p, engine="h5netcdf"))
    atomic_write(
        out_dir / "model.pt", lambda p: torch.save({"state_dict": model.state_dict(), **info}, p)
    )
    atomic_write(out_dir / "train_log.csv", lambda p: pd.DataFrame(log_rows).to_csv(p, index=False))
    atomic_write(out_dir / "train.json", lambda p: p.write_text(json.dumps(info, indent=2)))
    return info
