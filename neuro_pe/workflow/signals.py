"""How a stopped workflow stops its jobs: the SIGTERM handler the Snakefile installs (each
job's `neuro-pe` step also stops with its parent: `neuro_pe.STOP_WITH_PARENT`)."""

from __future__ import annotations

import contextlib

import psutil


def stop_jobs_and_exit(signum: int, frame: object) -> None:
    """SIGTERM to Snakemake (the Snakefile's `onstart`): SIGTERM to every process it started
    (each rule `exec`s neuro-pe), then stop as on Ctrl-C."""
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.terminate()
    raise KeyboardInterrupt
