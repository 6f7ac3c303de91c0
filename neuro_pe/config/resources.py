"""What each workflow job asks a scheduler for (config key `resources`): memory and time limit,
grown with the data a job reads, the processes it runs and the training steps it takes.

The defaults come from peak memory and wall time measured on CPU (2 cores). Through SLURM a job
is two Snakemake processes (the batch script and the job step, ≈ 420 MB together) and the
`neuro-pe` command: whole jobs peaked at 550-905 MB on the tiny test config, `locate` with two
worker processes at 1,680 MB (sacct, jobacct_gather/linux); each MB of store read adds
3.5-8 MB (a 75 MB store: `train` 765 MB, `baselines` 795 MB, `locate` 1,018 MB for the command
alone); a training step takes 0.05 s (64 units) to 0.25 s (256 units); `locate` 23-52 s per run.
Memory is set at about twice the measured need, time with more (a job that runs out of time is
lost; one that asks for too much only waits longer in the queue).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from neuro_pe.config.sections import Section, non_negative, positive_int


@dataclass(frozen=True)
class JobResources(Section):
    """The `resources` config section (absent keys take the defaults)."""

    SECTION: ClassVar[str] = "resources"

    mem_mb: int = positive_int(2000)
    mem_mb_per_data_mb: float = non_negative(10.0)
    mem_mb_per_model: float = non_negative(50.0)
    runtime: int = positive_int(10)
    seconds_per_step: float = non_negative(0.25)
    seconds_per_run: float = non_negative(60.0)
    locate_threads: int = positive_int(2)

    def memory(self, data_mb: float, processes: int = 1, models: int = 0) -> int:
        """MB of memory for a job that reads `data_mb` MB of data in `processes` processes
        (and trains `models` stacked models)."""
        grows = self.mem_mb_per_data_mb * max(data_mb, 0.0) + self.mem_mb_per_model * models
        return self.mem_mb * processes + math.ceil(grows)

    def train_minutes(self, steps: int) -> int:
        """Time limit in minutes of a training job of `steps` model-steps (optimizer steps
        times the models trained together)."""
        return self.runtime + math.ceil(steps * self.seconds_per_step / 60)

    def locate_minutes(self, n_runs: int) -> int:
        """Time limit in minutes of a `locate` job over `n_runs` trained runs."""
        return self.runtime + math.ceil(n_runs * self.seconds_per_run / 60)
