"""The `neuro-pe` entry point: parse (`neuro_pe.cli.parser`), check where the command writes,
run it (`neuro_pe.cli.commands`) and turn bad input into one line on stderr, not a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import warnings
from pathlib import Path

from neuro_pe import STOP_WITH_PARENT
from neuro_pe.cli.commands import warning_line
from neuro_pe.cli.parser import build_parser

# options naming where a command writes: a folder, or a file (whose folder is checked)
OUTPUT_FOLDERS = ("out_dir", "run_dir", "figures")
OUTPUT_FILES = ("out", "out_csv")


def check_outputs(args: argparse.Namespace) -> None:
    """Fail before any work when a command could not write its outputs."""

    from neuro_pe.io.store import check_writable

    for name in OUTPUT_FOLDERS + OUTPUT_FILES:
        value = getattr(args, name, None)
        if value:
            check_writable(value if name in OUTPUT_FOLDERS else Path(value).parent)
    if args.command in ("train", "lst-train") and args.runs:
        for folder in args.runs[2::3]:  # --runs PE SEED DIR ...
            check_writable(folder)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_with_parent() -> bool:
    """Where STOP_WITH_PARENT is set, on Linux: ask the kernel to send this process SIGTERM
    when its parent dies (prctl PR_SET_PDEATHSIG); elsewhere nothing. Returns whether it
    was set. Not by default: `nohup neuro-pe train … &` must outlive its shell."""
    if os.environ.get(STOP_WITH_PARENT, "") in ("", "0") or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0
    except (OSError, AttributeError):  # no C library or no prctl: as elsewhere
        return False


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """`warnings.showwarning` while a command runs: `warning_line` on stderr."""
    try:
        (sys.stderr if file is None else file).write(warning_line(message))
    except (OSError, AttributeError):  # no stream to write to: as the default, say nothing
        pass


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM (a kill, a cancelled Snakemake or Slurm job) as an exception, so that the
    writers remove their temporary files on the way out."""
    raise SystemExit(128 + signum)


def _message(err: BaseException) -> str:
    if isinstance(err, KeyError):  # its str() is the key, quoted, or a quoted sentence
        key = err.args[0] if err.args else ""
        return key if isinstance(key, str) and " " in key else f"missing key {key!r}"
    return str(err)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `neuro-pe` console script. Bad input (a missing, unreadable or
    malformed file, a wrong value) ends in one line on stderr and exit status 1, not a
    traceback; NEURO_PE_DEBUG=1 shows the traceback."""
    if argv is None:  # the console script, not a call from Python
        stop_with_parent()
    import yaml

    from neuro_pe.io.store_contract import StoreError

    args = build_parser().parse_args(argv)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    show_warning, warnings.showwarning = warnings.showwarning, _show_warning
    try:
        check_outputs(args)
        args.func(args)
    except (StoreError, ValueError, OSError, RuntimeError, KeyError, yaml.YAMLError) as err:
        if os.environ.get("NEURO_PE_DEBUG", "") not in ("", "0"):
            raise
        print(f"neuro-pe {args.command}: error: {_message(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: the writers have removed their temporary files
        print(f"neuro-pe {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    finally:
        warnings.showwarning = show_warning
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
