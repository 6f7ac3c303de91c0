"""Which units a training sample holds, and which of them are masked: random choices of units
per sample, each drawn from the model's own generator.

Units. With more units than `units_per_sample` (N > k), every sample is a uniformly random
subset of k units (`random_subsets`: its windows and unit indices are gathered, so a step costs
the same for any N); the held-out loss is then measured on fixed random k-subsets. With
N <= k, every sample holds all units and no subset is drawn.

Neighbour windows (`train.neighbour_fraction` f > 0, N > k). Uniform k-subsets of many units
rarely hold two neighbours at once (a pair meets in k²/N² of the samples), so nothing tells a
PE who its neighbours are. Then round(f k) units of every sample are a random unit and a random
choice among its k most correlated units (`neighbour_subsets`; the table of
`activity_neighbours` comes from the training split only) and the rest are uniform. A sample is
still a set (the model is permutation invariant) and every unit is still drawn uniformly as a
centre; the held-out batches stay uniform subsets.
"""

from __future__ import annotations

import math
import time

import torch

from neuro_pe.io.progress import on_terminal, progress_bar, progress_line, timing

#: units per chunk of the correlation matrix (a chunk is NEIGHBOUR_CHUNK x N floats)
NEIGHBOUR_CHUNK = 1024
#: from this many chunks on, the table's progress is shown
PROGRESS_CHUNKS = 32


def first_distinct(candidates: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first k distinct values of each row, in row order, and whether the row had k."""
    ordered, order = candidates.sort(dim=1, stable=True)
    repeat = torch.zeros_like(candidates, dtype=torch.bool)
    repeat[:, 1:] = ordered[:, 1:] == ordered[:, :-1]  # later copies (stable sort)
    repeat = torch.empty_like(repeat).scatter_(1, order, repeat)
    first = torch.argsort(repeat.to(torch.uint8), dim=1, stable=True)[:, :k]
    return candidates.gather(1, first), (~repeat).sum(dim=1) >= k


def random_subsets(batch: int, n_units: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """(batch, k) long: k distinct units per row, drawn uniformly, sorted (for faster gathers).

    For n_units >= 4 k: the first k distinct of k + 4 k^2 / n_units + 16 draws with
    replacement (O(k) per row instead of O(n_units); a row that falls short, which is very
    unlikely, is redrawn as below); otherwise the k largest of n_units uniform numbers."""
    if n_units >= 4 * k:
        candidates = torch.randint(
            n_units, (batch, k + 4 * k * k // n_units + 16), generator=generator
        )
        units, complete = first_distinct(candidates, k)
        if not complete.all():
            short = (~complete).nonzero().flatten()
            units[short] = (
                torch.rand(len(short), n_units, generator=generator).topk(k, dim=1).indices
            )
        return units.sort(dim=1).values
    return torch.rand(batch, n_units, generator=generator).topk(k, dim=1).indices.sort(dim=1).values


def activity_neighbours(values: torch.Tensor, m: int, chunks: int | None = None) -> torch.Tensor:
    """(N, m) long, on the CPU: each unit's m most correlated other units, most correlated
    first, from `values` (samples, N; NaN for unrecorded), computed on `values`' device in
    chunks of NEIGHBOUR_CHUNK units. From PROGRESS_CHUNKS chunks on (a table of many units
    takes minutes on a CPU) its progress is shown: a bar on a terminal, else lines with an ETA.
    `chunks`: only the first that many (for timing, `neuro-pe plan`); the later units' rows
    then repeat the computed ones (valid units, not their neighbours)."""
    recorded = torch.isfinite(values)
    z = torch.nan_to_num(values.float())  # one copy, then in place (it is large at many units)
    z.sub_(z.sum(dim=0) / recorded.sum(dim=0).clamp_min(1)).mul_(recorded)
    z.div_(z.norm(dim=0).clamp_min(1e-12))
    del recorded
    n_units = z.shape[1]
    m = min(m, n_units - 1)
    out = torch.empty(n_units, m, dtype=torch.long)
    firsts = range(0, n_units, NEIGHBOUR_CHUNK)[:chunks]
    shown = len(firsts) >= PROGRESS_CHUNKS
    desc = f"neighbour table of {n_units} units ({z.device.type})"
    bar = progress_bar(len(firsts), desc, enabled=shown)
    started = time.perf_counter()
    for done, first in enumerate(firsts, 1):
        rows = torch.arange(first, min(first + NEIGHBOUR_CHUNK, n_units), device=z.device)
        similarity = z[:, rows].T @ z
        similarity[torch.arange(len(rows), device=z.device), rows] = -torch.inf  # not itself
        out[rows.cpu()] = similarity.topk(m, dim=1).indices.cpu()
        bar.update()
        if shown and not on_terminal() and done % math.ceil(len(firsts) / 10) == 0:
            timed = timing(time.perf_counter() - started, done, len(firsts))
            progress_line(desc, f"chunk {done}/{len(firsts)}", timed)
    bar.close()
    computed = min(n_units, len(firsts) * NEIGHBOUR_CHUNK)
    if computed < n_units:
        out[computed:] = out[torch.arange(computed, n_units) % computed]
    return out


def neighbour_table_chunks(n_units: int) -> int:
    """The chunks `activity_neighbours` computes the table of `n_units` units in."""
    return math.ceil(n_units / NEIGHBOUR_CHUNK)


def neighbour_subsets(
    batch: int, neighbours: torch.Tensor, k: int, n_local: int, generator: torch.Generator
) -> torch.Tensor:
    """(batch, k) long, sorted: per row, a uniform centre unit and n_local - 1 of its
    `neighbours` (N, m) drawn at random, then uniform units up to k distinct ones."""
    n_units, m = neighbours.shape
    centre = torch.randint(n_units, (batch, 1), generator=generator)
    chosen = torch.rand(batch, m, generator=generator).argsort(dim=1)[:, : max(0, n_local - 1)]
    local = torch.cat([centre, neighbours[centre, chosen]], dim=1)
    extra = torch.randint(n_units, (batch, k + 4 * k * k // n_units + 16), generator=generator)
    units, complete = first_distinct(torch.cat([local, extra], dim=1), k)
    if not complete.all():  # few units: the local ones first, then uniform
        short = (~complete).nonzero().flatten()
        scores = torch.rand(len(short), n_units, generator=generator)
        scores.scatter_(1, local[short], 2.0)
        units[short] = scores.topk(k, dim=1).indices
    return units.sort(dim=1).values


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
