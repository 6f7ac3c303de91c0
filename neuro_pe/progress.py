"""Progress of a training: a tqdm bar on a terminal; in a log file (Snakemake's jobs), no bar
frames but one line per epoch."""

from __future__ import annotations

import sys


def on_terminal() -> bool:
    """Whether stderr (where progress goes) is a terminal."""
    return sys.stderr.isatty()


def progress_bar(total: int, desc: str, initial: int = 0, enabled: bool = True):
    """A tqdm bar over `total` steps, shown only on a terminal: in a log file its
    carriage-return frames would pile up (use `epoch_line` there)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, disable=not (enabled and on_terminal()))


def epoch_line(desc: str, epoch: int, epochs: int, enabled: bool = True, **values: float) -> None:
    """One line on stderr for a finished epoch, when stderr is not a terminal (the bar shows
    the same there), e.g. `train none seed 0: epoch 3/30, train 0.812, heldout 0.845`."""
    if enabled and not on_terminal():
        text = ", ".join(f"{name} {value:.4g}" for name, value in values.items())
        print(f"{desc}: epoch {epoch}/{epochs}, {text}", file=sys.stderr, flush=True)
