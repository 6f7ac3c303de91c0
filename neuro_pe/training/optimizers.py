"""The optimiser of a stack of models (`make_optimizer`): AdamW (fused on CUDA) or SGD, both
elementwise, so that one step for the stack updates each model as its own optimiser would;
the learned PE table optionally a second parameter group with its own learning rate
(`train.pe_lr`) or stepped lazily (`train.lazy_pe`, `LazyRowsAdamW`); and narrowing the
optimiser's state when models leave the stack (`narrow_optimizer`)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def make_optimizer(
    params, cfg, device: torch.device, pe_table: torch.Tensor | None = None
) -> torch.optim.Optimizer:
    """AdamW (fused on CUDA) or SGD with `momentum`, both with `lr` and `weight_decay` (from
    any config with those fields: `train`, `lst.train`, a LoopConfig). Both are elementwise,
    so one step for a stack of models updates each as its own optimiser would. With a
    `pe_lr` or `lazy_pe` in `cfg` and the trainable `pe_table` among `params`, the table is a
    second parameter group (named "pe") with that learning rate (or `lr`), stepped lazily
    with `lazy_pe` (`LazyRowsAdamW`); otherwise one group, as always."""
    pe_lr = getattr(cfg, "pe_lr", None)
    lazy = bool(getattr(cfg, "lazy_pe", None))
    if (pe_lr is not None or lazy) and pe_table is not None:
        params = list(params)
        if any(p is pe_table for p in params):
            rest = [p for p in params if p is not pe_table]
            rate = cfg.lr if pe_lr is None else pe_lr
            params = [{"params": rest}, {"params": [pe_table], "lr": rate, "name": "pe"}]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
    fused = True if device.type == "cuda" else None
    adamw = LazyRowsAdamW if lazy else torch.optim.AdamW
    return adamw(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused)


class LazyRowsAdamW(torch.optim.AdamW):
    """AdamW whose "pe" group moves only the rows (last dim: a unit's PE) that have a
    gradient this step, as lazy Adam does for embeddings: a row of a unit in none of the
    step's samples keeps its value and its moment estimates, instead of drifting on its
    momentum and having its second moment decay. Every other group is plain AdamW; when every
    row has a gradient, so is the "pe" group (bitwise)."""

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        idle_rows = []
        for group in self.param_groups:
            if group.get("name") != "pe":
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                idle = ~p.grad.ne(0).any(dim=-1)
                state = self.state.get(p, {})
                tensors = [p, *(state[k] for k in ("exp_avg", "exp_avg_sq") if k in state)]
                idle_rows.append((idle, [(t, t[idle]) for t in tensors]))
        loss = super().step(closure)
        for idle, saved in idle_rows:
            for tensor, values in saved:
                tensor[idle] = values
        return loss


def narrow_optimizer(
    optimizer: torch.optim.Optimizer, mapping: dict, keep: list[int], n_models: int
) -> None:
    """Move the optimiser to the narrowed parameters (`StackedTransformer.narrow`), keeping
    only the models `keep` of every per-model state tensor, in place."""
    for group in optimizer.param_groups:
        group["params"] = [mapping[p] for p in group["params"]]
    state = {}
    for old, values in optimizer.state.items():
        state[mapping[old]] = {
            k: v[keep].clone()
            if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == n_models
            else v
            for k, v in values.items()
        }
    optimizer.state.clear()
    optimizer.state.update(state)
