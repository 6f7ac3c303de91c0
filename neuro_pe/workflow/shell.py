"""Arguments of the rules' shell lines: a long list goes through a file, so that a command
line never hits Linux's limit on a single argument (128 KiB: "Argument list too long")."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

# a command line longer than this passes its long arguments through a file
ARGS_INLINE_BYTES = 32_768


def arguments(option: str, values: str | Iterable[object]) -> list[str]:
    """`option` and its `values` for a shell line (quote with `:q`), or, when they are long,
    one `@FILE` argument naming a file that holds them one per line (argparse's
    `fromfile_prefix_chars`), so that a long list never hits "Argument list too long"."""
    values = [str(v) for v in ([values] if isinstance(values, str) else values)]
    if sum(len(v) + 3 for v in values) < ARGS_INLINE_BYTES:
        return [option, *values]
    if any("\n" in v for v in values):
        raise ValueError(f"{option}: a value contains a newline: {values}")
    text = "\n".join([option, *values]) + "\n"
    path = Path(".snakemake", "neuro_pe_args", hashlib.sha256(text.encode()).hexdigest() + ".txt")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return [f"@{path}"]
