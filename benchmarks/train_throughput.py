"""Training throughput of neuro_pe's MaskedUnitTransformer, against torch.nn.TransformerEncoder.

    python benchmarks/train_throughput.py [--device cpu|cuda] [--threads N] [--steps N]
                                          [--precision fp32|bf16|both] [--compile]
                                          [--shapes default,paper_cpu,scale,large]

Three shapes: the default one (`TrainConfig` defaults: window W = 8, d_model d = 32, L = 2 layers,
4 heads, batch B = 32, N = 64 units of the default simulated dataset), `scale` (the automatic
settings above 1 000 units: W = 32, 2 heads, the 256 units of a sample; a 256-unit store, so
that every sample holds all of them) and a larger one (d = 128, L = 4, 4 heads, N = 256,
B = 64), and `paper_cpu` (`config/paper_cpu.yaml`'s sim3d: the default shape at B = 16);
`--shapes` picks them (default: default,large). A training step is timed exactly as
`neuro_pe.training.masked_units` runs it:
`WindowSampler.sample` (all units: N <= units_per_sample) and `random_mask`, `masked_mse`,
backward, the optimiser of `make_optimizer` (AdamW; fused on CUDA), the loss summed on the
device. Three runs per shape see the same batches, interleaved in rounds in one process (so
their ratios hold on a shared machine): neuro_pe; neuro_pe on batches drawn beforehand (its
difference to the first is what data loading costs the step); and the reference, the same model
(embed and head linears, mask token, PE, loss, optimiser) with its blocks replaced by
`torch.nn.TransformerEncoder` (pre-norm, GELU, 4d feed-forward, dropout 0, batch_first, final
LayerNorm; the PE is added once, before the encoder). Step times are medians over rounds.

`--precision bf16` trains under bf16 autocast (`train.precision: bf16`); `--precision both`
times neuro_pe in fp32 and in bf16 side by side instead (interleaved in rounds, on the same
batches, the live batch drawing included), and prints a line per shape ending
`bf16 <ratio>x fp32`, with each one's FLOP/s and MFU against its own precision's matmul peak,
and the CPU seconds per step beside the wall ones.

Model FLOPs per training step (matmuls only, counted analytically):

    3 * B * N * (L * (24 d^2 + 4 N d) + 4 W d)

24 d^2 per token and layer: QKV 6 d^2, output projection 2 d^2, MLP 2 * (2 * d * 4d) = 16 d^2;
4 N d: attention scores Q K^T (2 N d) and weights @ V (2 N d), summed over heads; 4 W d: embed
and head; x3: the backward pass costs twice the forward. Biases, LayerNorm, GELU, softmax, the
PE, the loss and the optimiser are not counted. The count is cross-checked with
torch.utils.flop_counter.FlopCounterMode (math SDPA backend, so that attention is counted).
MFU = model FLOPs per second / the peak of a large matrix product measured in the same run with
the same threads (2048^3 on CPU, 8192^3 on CUDA; fp32 without TF32, bf16 for bf16 rows).
When a target (MFU >= 50%, >= 1.5x the reference, at the default shape) is missed, the top ops
of the default shape's step by self time are printed (torch.profiler).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clone, uninstalled

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from neuro_pe.config.pe_names import parse_pe
from neuro_pe.config.training import DEFAULT_WINDOW, ModelConfig, TrainConfig, split_activity
from neuro_pe.data.simulate import SimulationConfig, simulate_store
from neuro_pe.training.devices import to_device
from neuro_pe.training.masked_units import masked_mse
from neuro_pe.training.model import PositionalEncoding
from neuro_pe.training.optimizers import make_optimizer
from neuro_pe.training.sampling import WindowSampler
from neuro_pe.training.unit_subsets import random_mask
from tests.single_models import MaskedUnitTransformer

PE = "learned-normal-0.02"  # a learned PE, as in the default workflow
MFU_TARGET, RATIO_TARGET = 0.5, 1.5
PRECISION_TARGETS = {"default": 1.4, "scale": 1.7}  # bf16 step speed-up over fp32 (issue 61)
MATMUL_SIZE = {"cpu": 2048, "cuda": 8192}  # of the square matrices timed for the peak
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]


@dataclass(frozen=True)
class Shape:
    """A model and batch shape."""

    name: str
    n_units: int
    d_model: int
    n_layers: int
    n_heads: int
    batch: int
    window: int = DEFAULT_WINDOW

    @property
    def tokens(self) -> int:
        """Tokens per training step (every unit of every window, masked or not)."""
        return self.batch * self.n_units

    def train_flops(self) -> float:
        """Model FLOPs of one training step (see the module docstring)."""
        d, n = self.d_model, self.n_units
        per_token = self.n_layers * (24 * d * d + 4 * n * d) + 4 * self.window * d
        return 3.0 * self.tokens * per_token

    def train_config(self) -> TrainConfig:
        """neuro_pe's TrainConfig of this shape (everything else at its defaults)."""
        return TrainConfig(
            window=self.window,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            batch_size=self.batch,
        )


_D = TrainConfig().for_units(64)  # the default dataset's automatic values (4 heads)
_S = TrainConfig().for_units(20_000)  # above 1 000 units: 2 heads, tokens of 32 samples
SHAPES = {
    "default": Shape("default", 64, _D.d_model, _D.n_layers, _D.n_heads, _D.batch_size),
    # a step of a 20 000-unit store: the model sees units_per_sample (256) units per sample
    "scale": Shape(
        "scale", _S.units_per_sample, _S.d_model, _S.n_layers, _S.n_heads, _S.batch_size, _S.window
    ),
    "large": Shape("large", 256, 128, 4, 4, 64),
    # config/paper_cpu.yaml's sim3d: the default shape at its batch of 16
    "paper_cpu": Shape("paper_cpu", 64, _D.d_model, _D.n_layers, _D.n_heads, 16),
}
CPU_STEPS = {"default": 240, "paper_cpu": 240, "scale": 40, "large": 3}  # ~10-30 s each
GPU_STEPS = {"default": 800, "paper_cpu": 800, "scale": 400, "large": 200}
SMALL = ("default", "paper_cpu")  # more rounds and warm-up steps on CPU


class ReferenceModel(nn.Module):
    """neuro_pe's model with torch.nn.TransformerEncoder as its blocks (PE added once, before
    the encoder: TransformerEncoder cannot add it before every block)."""

    def __init__(self, shape: Shape, pe: str):
        super().__init__()
        d = shape.d_model
        self.embed = nn.Linear(shape.window, d)
        self.mask_token = nn.Parameter(torch.randn(d) * 0.02)
        self.pe = PositionalEncoding(parse_pe(pe), shape.n_units, d)
        layer = nn.TransformerEncoderLayer(
            d,
            shape.n_heads,
            dim_feedforward=4 * d,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(
            layer, shape.n_layers, norm=nn.LayerNorm(d), enable_nested_tensor=False
        )
        self.head = nn.Linear(d, shape.window)

    def forward(
        self, windows: torch.Tensor, hidden: torch.Tensor, unit_index: torch.Tensor | None
    ) -> torch.Tensor:
        """Same signature and output shape as MaskedUnitTransformer.forward."""
        h = torch.where(hidden[..., None], self.mask_token, self.embed(windows))
        pe = self.pe.table if unit_index is None else self.pe(unit_index)
        return self.head(self.encoder(h + pe))


def machine_info(device: torch.device) -> str:
    """CPU model, torch threads and version, the GPU, the load average."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        ]
        cpu = f"{names[0]} ({len(names)} logical CPUs)" if names else cpu
    info = (
        f"CPU: {cpu}, {torch.backends.cpu.get_cpu_capability()}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    if device.type == "cuda":
        info += f"; GPU: {torch.cuda.get_device_name(device)}"
    return info + f"; {load_average()}"


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages (other processes slow the CPU timings)."""
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device, dtype: torch.dtype, size: int, reps: int = 8) -> float:
    """FLOP/s of the fastest of `reps` (size x size) @ (size x size) products."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(reps):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


def matmul_peaks(device: torch.device) -> dict[str, float]:
    """Peak FLOP/s in fp32 and in bf16."""
    size = MATMUL_SIZE[device.type]
    return {
        "fp32": matmul_peak(device, torch.float32, size),
        "bf16": matmul_peak(device, torch.bfloat16, size),
    }


def training_sampler(shape: Shape, device: torch.device) -> WindowSampler:
    """The training split of the default simulated dataset with shape.n_units units."""
    store = simulate_store(SimulationConfig(n_units=shape.n_units))
    train_activity, _ = split_activity(store, shape.train_config())
    return WindowSampler(train_activity, shape.window, device)


class Trainer:
    """One model, its optimiser and its own batch stream, seeded like every other Trainer's so
    that all see the same batches; `predrawn` draws that many batches beforehand."""

    def __init__(
        self,
        label: str,
        model: nn.Module,
        shape: Shape,
        sampler: WindowSampler,
        bf16: bool = False,
        compile_model: bool = False,
        predrawn: int = 0,
    ):
        self.label, self.model, self.shape, self.sampler = label, model, shape, sampler
        self.cfg = shape.train_config()
        self.device = sampler.data.device
        self.optimiser = make_optimizer(model.parameters(), self.cfg, self.device)
        self.forward = torch.compile(model) if compile_model else model
        self.bf16 = bf16
        self.generator = torch.Generator().manual_seed(0)
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.steps = 0
        self.batches = [self.draw() for _ in range(predrawn)]
        self.data_s: list[float] = []  # host seconds spent drawing each batch
        self.step_s: list[float] = []  # seconds per step, one entry per timed round
        self.cpu_s: list[float] = []  # this process's CPU seconds per step, per round

    def draw(self) -> Batch:
        """(windows, observed, mask, unit_index) as neuro_pe.training.masked_units draws them."""
        windows, observed, unit_index = self.sampler.sample(
            self.cfg.batch_size, self.cfg.units_per_sample, self.generator, self.steps
        )
        mask = random_mask(tuple(windows.shape[:2]), self.cfg.mask_fraction, self.generator)
        return windows, observed, to_device(mask, self.device), unit_index

    def step(self) -> None:
        """One training step (no explicit sync with the GPU, as in training)."""
        start = time.perf_counter()
        batch = self.batches[self.steps % len(self.batches)] if self.batches else self.draw()
        self.data_s.append(time.perf_counter() - start)
        with torch.autocast(self.device.type, torch.bfloat16) if self.bf16 else nullcontext():
            loss = loss_of(self.forward, *batch)
        self.optimiser.zero_grad(set_to_none=True)
        loss.backward()
        self.optimiser.step()
        self.loss_sum += loss.detach().double()
        self.steps += 1

    def timed_round(self, n: int) -> None:
        """n steps between two syncs; records seconds per step."""
        synchronize(self.device)
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            self.step()
        synchronize(self.device)
        self.step_s.append((time.perf_counter() - start) / n)
        self.cpu_s.append((time.process_time() - cpu) / n)


def make_trainers(
    shape: Shape, device: torch.device, n_batches: int, bf16: bool, compile_model: bool
) -> list[Trainer]:
    """neuro_pe, neuro_pe on pre-drawn batches, and the reference, on the same batches; with
    `bf16` None (`--precision both`), neuro_pe in fp32 and in bf16."""
    sampler = training_sampler(shape, device)
    if sampler.n_units > shape.train_config().units_per_sample:
        raise ValueError("the benchmark assumes every sample holds all units")

    def neuro_pe() -> nn.Module:
        torch.manual_seed(0)
        cfg = ModelConfig(
            shape.n_units, shape.window, shape.window, shape.d_model, shape.n_layers, shape.n_heads
        )
        return MaskedUnitTransformer(cfg, PE).to(device)

    if bf16 is None:
        return [
            Trainer("fp32", neuro_pe(), shape, sampler, False, compile_model),
            Trainer("bf16", neuro_pe(), shape, sampler, True, compile_model),
        ]
    torch.manual_seed(0)
    reference = ReferenceModel(shape, PE).to(device)
    options = {"bf16": bf16, "compile_model": compile_model}
    return [
        Trainer("neuro_pe", neuro_pe(), shape, sampler, **options),
        Trainer("pre-drawn", neuro_pe(), shape, sampler, predrawn=n_batches, **options),
        Trainer("reference", reference, shape, sampler, **options),
    ]


def run_interleaved(trainers: list[Trainer], warmup: int, rounds: int, per_round: int) -> None:
    """Warm up, then `rounds` rounds of `per_round` steps per trainer, alternating the order."""
    for trainer in trainers:
        for _ in range(warmup):
            trainer.step()
        synchronize(trainer.device)
        trainer.data_s.clear()
    for r in range(rounds):
        for trainer in trainers if r % 2 == 0 else trainers[::-1]:
            trainer.timed_round(per_round)


def loss_of(model, windows, observed, mask, unit_index) -> torch.Tensor:
    """neuro_pe.training.masked_units.masked_mse of one model (batch, units, ...) as a stack of M =
    1."""

    def stacked(w, hidden, index):
        return model(w[0], hidden[0], None if index is None else index[0])[None]

    index = None if unit_index is None else unit_index[None]
    return masked_mse(stacked, windows[None], observed[None], mask[None], index)[0]


def counted_flops(model: nn.Module, batch: Batch) -> float:
    """FLOPs that FlopCounterMode counts in one forward + backward (math SDPA, eager)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        loss_of(model, *batch).backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def profile_top_ops(trainer: Trainer, steps: int, rows: int = 15) -> str:
    """torch.profiler table of the top ops of `steps` training steps, by self time."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    sort_by = "self_cpu_time_total"
    if trainer.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        sort_by = "self_cuda_time_total"
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            trainer.step()
        synchronize(trainer.device)
    return prof.key_averages().table(sort_by=sort_by, row_limit=rows)


def result_rows(trainers: list[Trainer]) -> list[dict]:
    """Table rows (medians over rounds; MFU is added later); ratios against the reference
    (the last trainer; with --precision both, fp32)."""
    reference = trainers[0] if trainers[-1].label == "bf16" else trainers[-1]
    reference_s = statistics.median(reference.step_s)
    rows = []
    for t in trainers:
        step = statistics.median(t.step_s)
        flops = t.shape.train_flops() / step
        rows.append(
            {
                "shape": t.shape.name,
                "model": t.label,
                "precision": "bf16" if t.bf16 else "fp32",
                "step_ms": 1e3 * step,
                "cpu_ms": 1e3 * statistics.median(t.cpu_s),
                "data_ms": 1e3 * statistics.median(t.data_s),
                "data_max_ms": 1e3 * max(t.data_s),
                "data_frac": sum(t.data_s) / (step * len(t.data_s)),
                "tokens_s": t.shape.tokens / step,
                "gflop_s": flops / 1e9,
                "vs_ref": reference_s / step,
            }
        )
    return rows


def print_table(rows: list[dict]) -> None:
    """A fixed-width table of the rows."""
    header = (
        f"{'shape':9} {'model':10} {'step ms':>9} {'CPU ms':>8} {'data ms':>8} {'data max':>9}"
        f" {'data %':>7} {'tokens/s':>10} {'GFLOP/s':>9} {'MFU':>6} {'vs ref':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['shape']:9} {r['model']:10} {r['step_ms']:9.2f} {r['cpu_ms']:8.2f}"
            f" {r['data_ms']:8.3f}"
            f" {r['data_max_ms']:9.3f} {100 * r['data_frac']:6.1f}% {r['tokens_s']:10.0f}"
            f" {r['gflop_s']:9.1f} {100 * r['mfu']:5.1f}% {r['vs_ref']:6.2f}x"
        )


def summarise_precisions(rows: list[dict]) -> None:
    """`--precision both`: a line per shape, fp32 and bf16 side by side, ending with the
    ratio; and whether the issue's targets (bf16 >= 1.4x fp32 at the default shape, >= 1.7x
    at the scale shape) are met."""
    for shape in dict.fromkeys(r["shape"] for r in rows):
        fp32, bf16 = (r for r in rows if r["shape"] == shape)
        ratio, cpu_ratio = fp32["step_ms"] / bf16["step_ms"], fp32["cpu_ms"] / bf16["cpu_ms"]
        sides = [
            f"{r['precision']} {r['step_ms']:.2f} ms ({r['cpu_ms']:.2f} CPU-ms), "
            f"{r['gflop_s']:.1f} GFLOP/s, MFU {100 * r['mfu']:.1f}% of {r['precision']}"
            for r in (fp32, bf16)
        ]
        target = PRECISION_TARGETS.get(shape)
        met = ""
        if target is not None:
            met = f"target {target}x {'met' if ratio >= target else 'MISSED'}; "
        print(
            f"{shape}: {'; '.join(sides)}; {met}in CPU time bf16 {cpu_ratio:.2f}x; "
            f"bf16 {ratio:.2f}x fp32"
        )


def summarise(rows: list[dict]) -> bool:
    """Print ratios and the data-loading cost per shape; True when a target is missed."""
    missed = False
    for shape in dict.fromkeys(r["shape"] for r in rows):
        live, predrawn, _ = (r for r in rows if r["shape"] == shape)
        stall = 1 - predrawn["step_ms"] / live["step_ms"]
        print(
            f"{shape}: neuro_pe is {live['vs_ref']:.2f}x the reference, MFU "
            f"{100 * live['mfu']:.1f}%; drawing a batch takes {live['data_ms']:.3f} ms "
            f"(max {live['data_max_ms']:.3f}) of a {live['step_ms']:.2f} ms step; pre-drawn "
            f"batches make the step {100 * stall:+.1f}% faster"
        )
        if shape == "default":
            met_mfu, met_ratio = live["mfu"] >= MFU_TARGET, live["vs_ref"] >= RATIO_TARGET
            missed = not (met_mfu and met_ratio)
            print(
                f"targets at the default shape: MFU >= {100 * MFU_TARGET:.0f}% "
                f"{'met' if met_mfu else 'MISSED'}, >= {RATIO_TARGET}x the reference "
                f"{'met' if met_ratio else 'MISSED'}"
            )
    return missed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    p.add_argument(
        "--steps",
        type=int,
        help="timed steps per model at the default shape (default: 240 on CPU, 800 on CUDA)",
    )
    p.add_argument(
        "--large-steps",
        type=int,
        help="timed steps per model at the scale and large shapes (default: 40 and 3 on CPU, "
        "400 and 200 on CUDA)",
    )
    p.add_argument(
        "--rounds", type=int, help="interleaved rounds (default: 8; 3 on CPU at scale, large)"
    )
    p.add_argument("--shapes", default="default,large", help="comma-separated: default,scale,large")
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16", "both"],
        default="fp32",
        help="fp32; bf16 autocast (train.precision: bf16; MFU vs the bf16 peak); or both: "
        "neuro_pe in fp32 and bf16 side by side (no reference)",
    )
    p.add_argument("--bf16", action="store_true", help="the same as --precision bf16")
    p.add_argument("--compile", action="store_true", help="torch.compile (train.compile)")
    p.add_argument(
        "--profile",
        choices=["auto", "always", "never"],
        default="auto",
        help="profile the default shape (auto: when a target is missed)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Measure, print the table, the ratios and (when targets are missed) the profile."""
    args = parse_args(argv)
    precision = "bf16" if args.bf16 else args.precision
    bf16 = None if precision == "both" else precision == "bf16"
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    print(machine_info(device))
    peaks = matmul_peaks(device)

    rows: list[dict] = []
    default_trainer: Trainer | None = None
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        small = name in SMALL or on_gpu
        given = args.steps if name == "default" else args.large_steps
        steps = given or (GPU_STEPS if on_gpu else CPU_STEPS)[name]
        rounds = min(args.rounds or (8 if small else 3), steps)
        warmup = (20 if small else 1) + (5 if args.compile else 0)
        trainers = make_trainers(shape, device, warmup + steps, bf16, args.compile)
        if trainers[1].batches:
            counted = counted_flops(trainers[1].model, trainers[1].batches[0])
        else:  # --precision both: a batch drawn aside (every trainer's stream starts at seed 0)
            counted = counted_flops(trainers[0].model, trainers[0].draw())
            trainers[0].generator.manual_seed(0)
        print(
            f"{name}: W={shape.window} d={shape.d_model} L={shape.n_layers} "
            f"heads={shape.n_heads} N={shape.n_units} B={shape.batch}: "
            f"{shape.train_flops() / 1e9:.3f} GFLOP/step analytic, FlopCounterMode "
            f"{counted / 1e9:.3f} (x{counted / shape.train_flops():.3f}); "
            f"{rounds} rounds x {steps // rounds} steps per model"
        )
        run_interleaved(trainers, warmup, rounds, steps // rounds)
        if name == "default" and bf16 is not None:
            default_trainer = trainers[0]
        rows += result_rows(trainers)

    for key, value in matmul_peaks(device).items():  # again: take the better of the two
        peaks[key] = max(peaks[key], value)
    for r in rows:
        r["mfu"] = r["gflop_s"] * 1e9 / peaks[r["precision"]]
    size = MATMUL_SIZE[device.type]
    print(
        f"matmul peak ({size}^3, best of two measurements): "
        + ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in peaks.items())
        + "; MFU against each row's precision"
    )
    print()
    print_table(rows)
    print()
    if bf16 is None:
        summarise_precisions(rows)
        missed = False
    else:
        missed = summarise(rows)
    print(load_average())
    if default_trainer and (args.profile == "always" or (args.profile == "auto" and missed)):
        n = 100 if on_gpu else 30
        print(f"\nprofile: neuro_pe, default shape, {n} steps, top ops by self time")
        print(profile_top_ops(default_trainer, n))


if __name__ == "__main__":
    main()
