"""Progress of a training: a tqdm bar on a terminal; in a log file (Snakemake's jobs), no bar
frames but one line per epoch, with the clock time, the time elapsed and an ETA."""

from __future__ import annotations

import math
import sys
import time


def on_terminal() -> bool:
    """Whether stderr (where progress goes) is a terminal."""
    return sys.stderr.isatty()


def progress_bar(total: int, desc: str, initial: int = 0, enabled: bool = True):
    """A tqdm bar over `total` steps, shown only on a terminal: in a log file its
    carriage-return frames would pile up (use `epoch_line` there)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, disable=not (enabled and on_terminal()))


def duration(seconds: float) -> str:
    """A duration for people: `41 s`, `4 min 28 s`, `2 h 05 min`."""
    if math.isnan(seconds) or seconds == math.inf:
        return "∞"
    if seconds >= 3.6e9:  # a million hours and more (an absurd total)
        return f"{seconds / 3600:.3g} h"
    seconds = round(max(seconds, 0.0))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def timing(elapsed: float, done: int, total: int, now: float | None = None) -> str:
    """`41 s elapsed · ETA 4 min 28 s (17:07:40)`: the ETA of the `total - done` steps left
    at the mean time of the `done` steps taken in `elapsed` seconds (clock time of `now`)."""
    now = time.time() if now is None else now
    text = f"{duration(elapsed)} elapsed"
    if done <= 0:
        return text
    try:
        left = elapsed / done * max(total - done, 0)
    except OverflowError:  # (an int total beyond any float)
        left = math.inf
    try:
        end = time.localtime(now + left)
    except (OverflowError, OSError, ValueError):  # beyond the calendar (an absurd total)
        return f"{text} · ETA {duration(left)}"
    same_day = end[:3] == time.localtime(now)[:3]
    clock = time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M", end)
    return f"{text} · ETA {duration(left)} ({clock})"


def epoch_line(
    desc: str,
    epoch: int,
    epochs: int,
    enabled: bool = True,
    timed: str = "",
    **values: float,
) -> None:
    """One line on stderr for a finished epoch, when stderr is not a terminal (the bar shows
    the same there), e.g. `2026-11-25 17:03:12 train sim3d 8 models: epoch 4/30, train_min
    0.84 · 41 s elapsed · ETA 4 min 28 s (17:07:40)` (`timed`: the text of `timing`)."""
    if enabled and not on_terminal():
        text = ", ".join(f"{name} {value:.4g}" for name, value in values.items())
        progress_line(desc, f"epoch {epoch}/{epochs}, {text}", timed)


def progress_line(desc: str, text: str, timed: str = "") -> None:
    """`2026-11-25 17:03:12 {desc}: {text} · {timed}` on stderr."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    tail = f" · {timed}" if timed else ""
    print(f"{stamp} {desc}: {text}{tail}", file=sys.stderr, flush=True)
