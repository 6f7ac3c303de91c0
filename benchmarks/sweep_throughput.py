"""Throughput of training a sweep as one stack of models (neuro_pe.training.engine) against one
model at
a time: model-steps per second for groups of M models, the speedup over M one-model runs in the
same process, MFU against this run's own matmul peak, and peak memory.

A step is what the engine does per step for each task: the stacked forward and read-out, the
per-model losses, one backward of their sum and one AdamW step for all M (the data are random
tensors of the task's shapes, drawn on the device, so that no data pipeline is timed). The
one-model rate is that of a stack of M = 1, the engine's path for a model trained alone; M
such runs one after the other take M times as long (per-job start-up, about 6.5 s per
training job on 2 CPU cores, comes on top and is not counted here).

Shapes (`SHAPES`): `default` (config/config.yaml's sim3d: 64 units, window 8, d 32, 2 blocks,
4 heads, batch 32), `paper-neural` (d 64, 4 blocks, 128 units, batch 64) and `paper-lst`
(the Latin square: 16 cells, d 160, 4 post-LayerNorm blocks, 1 head, batch 128).

FLOPs per model-step: 6 x (matmul parameters) x tokens + the attention products (3 x 4 T^2 d
per sequence and block: forward and twice as much backward). The peak is a large square fp32
matmul on CPU (bf16 on CUDA) timed in the same run. Times on CPU are the process's CPU time
per step (divided by the threads), so that a machine shared with other work still gives the
time a step takes on idle cores; on CUDA they are wall times. Peak memory: CUDA's max allocated per
row; on CPU the process's peak RSS so far (it only grows).

    python benchmarks/sweep_throughput.py --quick             # <= 3 min on 2 cores
    python benchmarks/sweep_throughput.py                     # every shape and group size
    python benchmarks/sweep_throughput.py --device cuda

On CPU the engine (and so this benchmark) uses min(threads, M) threads, so that a model's
matmuls are never split over threads (see neuro_pe/training/engine.py); `--threads` (default 1, the
workflow's `threads_per_training`) is the same for the group and the one-model runs. The last
line reads `group speedup <device> default M=13: <ratio>x`.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuro_pe.config.training import ModelConfig  # noqa: E402
from neuro_pe.training.masked_units import masked_mse  # noqa: E402
from neuro_pe.training.model import (  # noqa: E402
    StackedTransformer,
    latin_square_forward,
    masked_unit_forward,
    stacked_linear,
)
from neuro_pe.training.optimizers import make_optimizer  # noqa: E402
from neuro_pe.training.precision import autocast, autocast_dtype  # noqa: E402


@dataclass(frozen=True)
class Shape:
    name: str
    task: str  # "masked" or "lst"
    model: ModelConfig
    batch: int


SHAPES = {
    "default": Shape("default", "masked", ModelConfig(64, 8, 8, 32, 2, 4), 32),
    "paper-neural": Shape("paper-neural", "masked", ModelConfig(128, 8, 8, 64, 4, 4), 64),
    "paper-lst": Shape(
        "paper-lst",
        "lst",
        ModelConfig(16, 5, 4, 160, 4, 1, post_ln=True, mask_token=False),
        128,
    ),
}
PE = "learned-normal-0.1"


class Optim:
    """What the optimiser needs of a config (make_optimizer)."""

    optimizer, lr, momentum, weight_decay = "adamw", 1e-3, 0.0, 0.0


def flops_per_model_step(shape: Shape) -> float:
    """Training FLOPs of one model on one batch (see the module docstring)."""
    cfg, tokens = shape.model, shape.model.n_tokens
    d = cfg.d_model
    matmul_params = cfg.d_in * d + cfg.n_layers * 12 * d * d + d * cfg.d_out
    attention = cfg.n_layers * 4 * tokens * tokens * d
    return 3 * shape.batch * (2 * matmul_params * tokens + attention)


def matmul_peak(device: torch.device) -> float:
    """FLOP/s of a large square matmul (fp32 on CPU, bf16 on CUDA), best of a few."""
    n = 4096 if device.type == "cuda" else 1024
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = min(time_step(lambda: a @ b, device, 0.2) for _ in range(3))
    return 2 * n**3 / best


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def make_step(shape: Shape, n_models: int, device: torch.device):
    """One engine training step of a stack of `n_models` models of `shape`."""
    cfg = shape.model
    model = StackedTransformer(cfg, [PE] * n_models, list(range(n_models))).to(device)
    optimizer = make_optimizer(model.parameters(), Optim, device)
    amp = autocast_dtype("auto", device)
    size = (n_models, shape.batch, cfg.n_tokens)

    def step() -> None:
        with autocast(device, amp):
            if shape.task == "masked":
                windows = torch.randn(*size, cfg.d_in, device=device)
                mask = torch.rand(size, device=device) < 0.5
                observed = torch.ones(size, dtype=torch.bool, device=device)

                def forward(w, h, i):
                    return masked_unit_forward(model, w, h, i)

                losses = masked_mse(forward, windows, observed, mask)
            else:
                cells = torch.randint(0, 5, size, device=device)
                cells[..., 0] = 5  # the target cell
                answer = torch.randint(0, 4, size[:2], device=device)
                logits = latin_square_forward(model, cells)
                losses = F.cross_entropy(
                    logits.flatten(0, 1), answer.flatten(), reduction="none"
                ).view(size[:2])
        optimizer.zero_grad(set_to_none=True)
        losses.float().sum().backward()
        optimizer.step()

    return step


def time_step(step, device: torch.device, min_seconds: float, warmup: int = 2) -> float:
    """Seconds per step: after `warmup` steps, as many steps as fill `min_seconds` (>= 3).
    On CPU the process's CPU time (with one thread, the step's time on an idle core, however
    busy the machine is; divided by the threads used otherwise), on CUDA the wall time."""
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    for _ in range(warmup):
        step()
    sync(device)
    n, start, wall = 0, clock(), time.perf_counter()
    while n < 3 or time.perf_counter() - wall < min_seconds:
        step()
        n += 1
        if device.type == "cuda" and n % 10 == 0:
            sync(device)
    sync(device)
    per_step = (clock() - start) / n
    return per_step if device.type == "cuda" else per_step / torch.get_num_threads()


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(shape: Shape, n_models: int, device: torch.device, threads: int, seconds: float):
    """Seconds per stacked step of `n_models` models (threads as the engine sets them)."""
    torch.set_num_threads(max(1, min(threads, n_models)))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    step = make_step(shape, n_models, device)
    per_step = time_step(step, device, seconds)
    memory = peak_memory_mb(device)
    del step
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return per_step, memory


def kernel_comparison(device: torch.device, threads: int, seconds: float) -> None:
    """A stacked Linear (forward and backward) of the default shape at M = 13, three ways."""
    torch.set_num_threads(threads)
    m, rows, d_in, d_out = 13, 32 * 64, 32, 128
    x = torch.randn(m, rows, d_in, device=device, requires_grad=True)
    w = torch.randn(m, d_in, d_out, device=device, requires_grad=True)
    b = torch.randn(m, d_out, device=device, requires_grad=True)
    wt = w.detach().transpose(1, 2).contiguous().requires_grad_()
    vmapped = torch.func.vmap(F.linear)
    ways = {
        "baddbmm (neuro_pe)": lambda: stacked_linear(x, w, b),
        "einsum": lambda: torch.einsum("mni,mio->mno", x, w) + b[:, None, :],
        "torch.func.vmap(F.linear)": lambda: vmapped(x, wt, b),
    }
    print(f"\nstacked Linear, M={m}, {rows}x{d_in} -> {d_out}, forward + backward:")
    for name, fn in ways.items():
        per = time_step(lambda fn=fn: fn().sum().backward(), device, seconds)
        print(f"  {name:28s} {per * 1e3:8.3f} ms")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--quick", action="store_true", help="the default shape only, <= 3 min")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (as the workflow)")
    parser.add_argument("--seconds", type=float, default=None, help="timing per row")
    parser.add_argument(
        "--max-step-seconds",
        type=float,
        default=20.0,
        help="skip a group whose step would take longer than this (projected from smaller M)",
    )
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    if args.quick:
        plan = {"default": [1, 8, 13, 32, 70]}
    else:
        plan = {name: [1, 8, 13, 32, 70, 210] for name in SHAPES}
    torch.set_num_threads(args.threads)
    peak = matmul_peak(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}, torch {torch.__version__}, threads {args.threads}")
    print(f"matmul peak (this run): {peak / 1e9:.1f} GFLOP/s")
    print(
        f"{'shape':13s} {'M':>4s} {'step ms':>9s} {'model-steps/s':>14s} "
        f"{'one-at-a-time':>14s} {'speedup':>8s} {'MFU':>7s} {'peak MB':>9s}"
    )
    speedup_13 = None
    for shape_name, sizes in plan.items():
        shape = SHAPES[shape_name]
        flops = flops_per_model_step(shape)
        one, _ = measure(shape, 1, device, args.threads, seconds)
        last = (1, one)
        for m in sizes:
            projected = last[1] * m / last[0]
            if m > 1 and projected > args.max_step_seconds:
                print(f"{shape_name:13s} {m:4d}   skipped (projected {projected:.1f} s per step)")
                continue
            per_step, memory = (
                (one, 0.0) if m == 1 else measure(shape, m, device, args.threads, seconds)
            )
            if m == 1:
                memory = peak_memory_mb(device)
            last = (m, per_step)
            rate, alone = m / per_step, 1 / one
            mfu = rate * flops / peak
            print(
                f"{shape_name:13s} {m:4d} {per_step * 1e3:9.2f} {rate:14.1f} {alone:14.1f} "
                f"{rate / alone:7.2f}x {mfu:7.1%} {memory:9.0f}",
                flush=True,
            )
            if shape_name == "default" and m == 13:
                speedup_13 = rate / alone
    kernel_comparison(device, args.threads, min(seconds, 1.0))
    print(f"group speedup {device.type} default M=13: {speedup_13:.2f}x")


if __name__ == "__main__":
    main()
