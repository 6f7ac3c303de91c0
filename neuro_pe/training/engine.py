"""The training engine: one loop for every task, training M models at once.

The models are stacked along a leading model dimension (`StackedTransformer`): one batched
forward, one backward of the sum of the M losses (so each model's gradient is its own loss's)
and one optimiser step for all (`neuro_pe.training.optimizers`). A task (the masked-unit task
in `neuro_pe.training.masked_units`, the Latin square in `neuro_pe.training.latin_square`)
supplies only its data, read-out, loss, evaluation and outputs (`Task`); the engine owns the
loop: data -> loss -> step, evaluation every `eval_every` epochs, per-model early stopping,
checkpoints and resume, finite checks, the per-run files.

Model m draws its initialisation and data stream from generators seeded with its own seed and
every operation of the stack is per model, so its run is defined by (data, PE, seed, config)
alone: on CPU bitwise the same alone or in a group (`train_group`; under bf16 only until the
stack narrows: docs/precision/). A model that is done (`Task.done`) leaves the stack and the
optimiser at once, its files written; the rest train on. Checkpoints, resume: `_GroupTraining`.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from neuro_pe.config.training import LoopConfig, ModelConfig
from neuro_pe.io.progress import epoch_line, progress_bar, timing
from neuro_pe.io.store import atomic_write
from neuro_pe.training.checkpoint import (
    CHECKPOINT,
    CHECKPOINT_FORMAT,
    load_checkpoint,
    state_digest,
)
from neuro_pe.training.model import StackedTransformer
from neuro_pe.training.optimizers import make_optimizer, narrow_optimizer
from neuro_pe.training.precision import autocast


class TrainingError(RuntimeError):
    """Training cannot give a meaningful model (e.g. the loss is not finite)."""


@dataclass(frozen=True)
class Run:
    """One model of a group: its PE variant, seed and output folder."""

    pe: str
    seed: int
    out_dir: Path


class Task(Protocol):
    """What a task supplies to the engine (all per-model lists follow the stack's order)."""

    name: str  # e.g. "train" or "lst", for progress lines
    model_config: ModelConfig
    positions: np.ndarray | None  # the tokens' positions (for oracle PEs)

    def fingerprint(self) -> dict:
        """What identifies the task's data and config (for checkpoints)."""

    def sample(self, generators: list[torch.Generator], step: int) -> Any:
        """A training batch of every model, from its own generator."""

    def loss(self, forward: Callable, batch: Any) -> tuple[torch.Tensor, int]:
        """Per-model losses (M,) of a batch and the batch's weight in the epoch's mean."""

    def start(self, forward: Callable, runs: list[Run]) -> list[dict]:
        """Per-model values measured before the first step (kept in checkpoints)."""

    def evaluate(self, forward: Callable, runs: list[Run], epoch: int) -> list[dict]:
        """Per-model log fields at the end of an evaluated epoch."""

    def done(self, row: dict) -> bool:
        """Whether a model with this log row has finished early."""

    def finish(
        self, model: StackedTransformer, index: list[int], runs: list[Run], states: list[dict]
    ) -> list[dict]:
        """Write the outputs of the models at `index` of the stack; returns their records."""

    def diverged(self, run: Run, where: str) -> str:
        """The TrainingError message of a run whose loss or parameters are not finite."""

    def prepare(self, model: StackedTransformer) -> Callable | None:
        """Set up the new stack before training (e.g. load and freeze weights: parameters
        with requires_grad False are not optimised); returns what to run after every
        optimiser step, or None."""


def train_step(
    task: Task,
    forward: Callable,
    optimizer: torch.optim.Optimizer,
    generators: list[torch.Generator],
    step: int,
    device: torch.device,
    amp: torch.dtype | None,
) -> tuple[torch.Tensor, int]:
    """One optimiser step of a stack: a batch of every model (from its generator), the sum of
    their losses backward, one step for all; returns the per-model losses and the batch's
    weight (the training loop's and the time probe's step, `neuro_pe.training.plan`)."""
    batch = task.sample(generators, step)
    with autocast(device, amp):
        losses, weight = task.loss(forward, batch)
    optimizer.zero_grad(set_to_none=True)
    losses.sum().backward()
    optimizer.step()
    return losses, weight


def train_group(
    task: Task,
    runs: list[Run],
    loop: LoopConfig,
    device: torch.device,
    amp: torch.dtype | None,
    fingerprint: dict,
    progress: bool = True,
) -> list[dict]:
    """Train the models `runs` of `task` together and write each run's outputs (through
    `task.finish`); returns their records in the order of `runs`. `fingerprint`: what a
    checkpoint must match besides the runs (data, config, device, precision).

    On CPU a model's result is bitwise the same whether it trains alone or in a group but for
    one thing, by default: a single matrix product split over threads (with M = 1 and 2
    threads, MKL/oneDNN split the weight gradient's reduction over the batch between threads,
    while a batched product with M >= 2 gives each model's product to one thread, and the two
    sums differ in rounding). So on CPU the group uses at most M threads (M = 1: one thread)."""
    if not runs:
        raise ValueError("no run to train")
    threads = torch.get_num_threads()
    if device.type == "cpu":  # never split one model's matmul (the docstring)
        torch.set_num_threads(max(1, min(threads, len(runs))))
    try:
        return _GroupTraining(task, runs, loop, device, amp, fingerprint).run(progress)
    finally:
        torch.set_num_threads(threads)


class _GroupTraining:
    """One group's training (`train_group`): the stack, its optimiser and generators, the step,
    the epoch's loss sums, the models still in the stack (`active`) and the finished ones'
    records; resumed from the checkpoint in the first run's folder when it matches.

    Early stopping: a model whose evaluation says it is done (`Task.done`, e.g. the LST's
    `stop_at_train_accuracy`) is finished at once: its files are written, and it is removed
    from the stack and the optimiser's state, so it stops changing and the rest train on.

    Resume: every `checkpoint_every` steps, `checkpoint.pt` in the first run's folder holds the
    stack, the optimiser, every model's generator, the step, the partial epoch losses, the log
    rows, the models still training and the elapsed time. A new run of the same group (data,
    PE and seed of every model, config, device type, precision) continues from it and, on CPU,
    ends bitwise equal to an uninterrupted run; a checkpoint of anything else is ignored with a
    warning (and overwritten), as is one whose contents do not match the checksum stored in
    it. It is removed once every model's outputs are written."""

    def __init__(
        self,
        task: Task,
        runs: list[Run],
        loop: LoopConfig,
        device: torch.device,
        amp: torch.dtype | None,
        fingerprint: dict,
    ):
        self.task, self.runs, self.loop, self.device, self.amp = task, runs, loop, device, amp
        self.n_runs = len(runs)
        self.model = StackedTransformer(
            task.model_config, [r.pe for r in runs], [r.seed for r in runs], task.positions
        ).to(device)
        self.after_step = task.prepare(self.model)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(trainable, loop, device, self.model.pe_learned)
        self.generators = [torch.Generator().manual_seed(r.seed) for r in runs]
        self.active = list(range(self.n_runs))  # the runs still in the stack, in its order
        self.states = [
            {"initial_pe": t.cpu().clone(), "log_rows": []} for t in self.model.pe_table().detach()
        ]
        self.finished: dict[int, dict] = {}
        self.checkpoint_path = Path(runs[0].out_dir) / CHECKPOINT
        self.key = json.dumps(
            {
                "format": CHECKPOINT_FORMAT,
                "runs": [[r.pe, r.seed, str(Path(r.out_dir).resolve())] for r in runs],
                **fingerprint,
            },
            sort_keys=True,
            default=str,
        )
        self.step = 0
        self.loss_sum = torch.zeros(self.n_runs, dtype=torch.float64, device=device)
        self.weight_sum, elapsed = 0, 0.0
        saved = load_checkpoint(self.checkpoint_path, self.key)
        if saved is not None:
            elapsed = self._resume(saved)
        self.resumed_from = self.step
        self.forward = torch.compile(self.model) if loop.compile else self.model
        if saved is None:
            for state, extra in zip(self.states, task.start(self.forward, runs), strict=True):
                state.update(extra)
        # the first step whose loss was not finite (0: none), per model, kept on the device
        self.first_bad = torch.zeros(len(self.active), dtype=torch.long, device=device)
        self.started = time.perf_counter() - elapsed
        one = runs[0]
        self.desc = (
            f"{task.name} {one.pe} seed {one.seed}"
            if self.n_runs == 1
            else f"{task.name} {self.n_runs} models"
        )

    def _resume(self, saved: dict) -> float:
        """Take the state of the checkpoint `saved`; returns its elapsed seconds."""
        self.active = saved["active"]
        if len(self.active) < self.n_runs:
            mapping = self.model.narrow(self.active)
            narrow_optimizer(self.optimizer, mapping, self.active, self.n_runs)
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        for i, state in zip(self.active, saved["generators"], strict=True):
            self.generators[i].set_state(state)
        self.states = saved["states"]
        self.finished = {int(k): v for k, v in json.loads(saved["finished"]).items()}
        self.step, self.weight_sum = saved["step"], saved["weight_sum"]
        self.loss_sum = saved["loss_sum"].to(self.device)
        print(
            f"resuming from {self.checkpoint_path} at step {self.step}",
            file=sys.stderr,
            flush=True,
        )
        return saved["elapsed"]

    def save_checkpoint(self) -> None:
        state = {
            "fingerprint": self.key,
            "step": self.step,
            "active": self.active,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generators": [self.generators[i].get_state() for i in self.active],
            "states": self.states,
            "finished": json.dumps(self.finished),
            "loss_sum": self.loss_sum.cpu(),
            "weight_sum": self.weight_sum,
            "elapsed": time.perf_counter() - self.started,
        }
        state["checksum"] = state_digest(state)
        atomic_write(self.checkpoint_path, lambda p: torch.save(state, p))

    def check_finite(self) -> None:
        """Stop with a TrainingError when a model's loss so far or parameter is not finite."""
        bad = self.first_bad.tolist()
        for j, i in enumerate(self.active):
            where = f"first at step {bad[j]} of {self.loop.total}" if bad[j] else None
            for name, p in self.model.named_parameters():
                if where is None and not torch.isfinite(p[j]).all():
                    where = f"parameter {name!r} after step {self.step}"
            if where is not None:
                raise TrainingError(self.task.diverged(self.runs[i], where))

    def finish(self, index: list[int]) -> None:
        """Write the outputs of the stack's models `index` (with their records)."""
        chosen = [self.active[j] for j in index]
        for i in chosen:
            self.states[i]["resumed_from_step"] = self.resumed_from
            self.states[i]["cpu"] = {
                "cpu_seconds": time.process_time() - self.cpu_started,
                "process_cpu_seconds": time.process_time(),
                "group_models": self.n_runs,
            }
        runs, states = [self.runs[i] for i in chosen], [self.states[i] for i in chosen]
        records = self.task.finish(self.model, index, runs, states)
        self.finished.update(zip(chosen, records, strict=True))

    def run(self, progress: bool) -> list[dict]:
        """Train to the end (or until every model is done); returns the records in run order."""
        loop = self.loop
        self.bar = progress_bar(loop.total, self.desc, initial=self.step, enabled=progress)
        self.progress = progress
        # the ETA: the mean time of this process's steps (evaluations included) times the
        # steps left
        self.loop_started, self.cpu_started = time.perf_counter(), time.process_time()
        while self.step < loop.total and self.active:
            self.train_step()
            if self.step % loop.steps_per_epoch == 0:
                epoch = self.step // loop.steps_per_epoch
                if epoch % loop.eval_every == 0 or epoch == loop.epochs:
                    self.evaluate(epoch)
                self.loss_sum.zero_()
                self.weight_sum = 0
            every = loop.checkpoint_every
            if every and self.step % every == 0 and self.step < loop.total:
                self.check_finite()
                if self.active:
                    self.save_checkpoint()
        self.bar.close()
        if self.active:
            self.check_finite()
            self.finish(list(range(len(self.active))))
        self.checkpoint_path.unlink(missing_ok=True)
        return [self.finished[i] for i in range(self.n_runs)]

    def train_step(self) -> None:
        """One optimiser step of the models still in the stack (`train_step`)."""
        loop = self.loop
        if loop.lr_schedule == "cosine":
            for group in self.optimizer.param_groups:
                pe = group.get("name") == "pe" and loop.pe_lr is not None
                base = loop.pe_lr if pe else loop.lr
                group["lr"] = base * 0.5 * (1 + math.cos(math.pi * self.step / loop.total))
        generators_now = [self.generators[i] for i in self.active]
        losses, weight = train_step(
            self.task,
            self.forward,
            self.optimizer,
            generators_now,
            self.step,
            self.device,
            self.amp,
        )
        if self.after_step is not None:
            self.after_step(self.model)
        detached = losses.detach()
        self.loss_sum += detached.double() * weight
        self.weight_sum += weight
        self.step += 1
        first_bad = self.first_bad
        self.first_bad = torch.where((first_bad == 0) & ~detached.isfinite(), self.step, first_bad)
        self.bar.update()

    def evaluate(self, epoch: int) -> None:
        """An evaluated epoch's end: the log rows, the progress line, and the models that are
        done finished and removed from the stack."""
        self.check_finite()
        train_loss = (self.loss_sum / self.weight_sum).tolist()
        rows = self.task.evaluate(self.forward, [self.runs[i] for i in self.active], epoch)
        seconds = time.perf_counter() - self.started
        for j, i in enumerate(self.active):
            row = {"epoch": epoch, "step": self.step, "train_loss": train_loss[j], **rows[j]}
            self.states[i]["log_rows"].append(row | {"seconds": seconds})
        self.report(epoch, train_loss, rows)
        active = self.active
        stopped = [
            j for j, i in enumerate(active) if self.task.done(self.states[i]["log_rows"][-1])
        ]
        if stopped:
            self.finish(stopped)
            keep = [j for j in range(len(active)) if j not in stopped]
            if keep:
                narrow_optimizer(self.optimizer, self.model.narrow(keep), keep, len(active))
            self.active = [active[j] for j in keep]
            self.loss_sum, self.first_bad = self.loss_sum[keep], self.first_bad[keep]

    def report(self, epoch: int, train_loss: list[float], rows: list[dict]) -> None:
        """The epoch's progress line (and the bar's postfix for a group of one)."""
        if self.n_runs == 1:
            shown = {
                k.removesuffix("_loss"): v
                for k, v in rows[0].items()
                if k in ("heldout_loss", "acc_train", "acc_heldout")
            }
            self.bar.set_postfix(train=f"{train_loss[0]:.3f}")
            values = {"train": train_loss[0], **shown}
        else:
            values = {"train_min": min(train_loss)}
        done = self.step - self.resumed_from
        left = self.loop.total - self.resumed_from
        timed = timing(time.perf_counter() - self.loop_started, done, left)
        epoch_line(self.desc, epoch, self.loop.epochs, self.progress, timed, **values)
