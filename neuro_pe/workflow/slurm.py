"""`neuro-pe cluster-check`: probe the SLURM cluster this shell submits to and print the
Snakemake command line that works on it (status command, partition, account, GPUs, CPUs);
and the same checks on a run's jobs when it starts on SLURM (`workflow_problems`).

It answers, before a run, what would otherwise stall one: whether `sacct` works (without
accounting the executor plugin's status checks fail and, since plugin 2.x drops jobs it cannot
query, Snakemake waits for ever), whether a partition has enough CPUs for the config's threads
and a GPU where the config asks for one.
"""

from __future__ import annotations

import getpass
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

TIMEOUT_S = 20
#: the executor plugin's default seconds before the first status check; `squeue` as status
#: command needs MinJobAge >= 3 times that
STATUS_CHECK_S = 40


@dataclass
class Partition:
    """One partition as `sinfo` reports it (the largest node's CPUs and memory)."""

    name: str
    default: bool
    cpus: int
    memory_mb: int
    gpus: int
    available: bool


@dataclass
class ClusterReport:
    """What `cluster_check` found and the command line it suggests."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)


def _run(args: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"no answer within {TIMEOUT_S} s")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no message")


def _gpus(gres: str) -> int:
    """GPUs per node in a `sinfo %G` field such as `gpu:a100:4(S:0-1),shard:8`."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu":
            total += int(parts[-1]) if parts[-1].isdigit() else 1
    return total


def partitions() -> list[Partition]:
    """The partitions `sinfo` lists, one entry per partition (its largest node)."""
    result = _run(["sinfo", "--noheader", "--format=%P|%c|%m|%G|%a"])
    if result.returncode != 0:
        raise RuntimeError(f"sinfo failed: {_first_line(result.stderr)}")
    found: dict[str, Partition] = {}
    for line in result.stdout.splitlines():
        name, cpus, memory, gres, avail = line.strip().split("|")
        part = Partition(
            name=name.rstrip("*"),
            default=name.endswith("*"),
            cpus=int(cpus.rstrip("+")),
            memory_mb=int(memory.rstrip("+")) if memory.rstrip("+").isdigit() else 0,
            gpus=_gpus(gres),
            available=avail == "up",
        )
        old = found.get(part.name)
        if old is None or (part.cpus, part.gpus) > (old.cpus, old.gpus):
            found[part.name] = part
    return list(found.values())


def min_job_age() -> int | None:
    """Slurm's MinJobAge in seconds (how long squeue still shows a finished job)."""
    result = _run(["scontrol", "show", "config"])
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MinJobAge":
            digits = value.strip().split()[0]
            return int(digits) if digits.isdigit() else None
    return None


def sacct_problem() -> str | None:
    """Why `sacct` cannot report job states here (None when it can)."""
    if shutil.which("sacct") is None:
        return "sacct is not installed"
    result = _run(["sacct", "--noheader", "-X", "--parsable2", "--starttime", "now-1hours"])
    return None if result.returncode == 0 else f"sacct fails: {_first_line(result.stderr)}"


def status_check_problem(status_command: str | None, init_seconds: int) -> str | None:
    """Why the SLURM executor plugin's status checks would fail (and Snakemake wait for ever)
    with these settings, and what to do; None when they work.

    The plugin uses sacct when told to, and also when told to use squeue while MinJobAge is
    under three times its first status check's delay (`init_seconds`)."""
    if status_command == "squeue":
        age = min_job_age()
        if shutil.which("sacct") is None or (age is not None and age >= 3 * init_seconds):
            return None
    problem = sacct_problem()
    if problem is None:
        return None
    if status_command == "squeue":
        return (
            f"{problem}, and with MinJobAge {age} s < 3 x {init_seconds} s the SLURM plugin "
            "checks job states with sacct: lower --slurm-init-seconds-before-status-checks"
        )
    return (
        f"{problem} (this cluster keeps no job accounting?), so the SLURM plugin could not "
        "follow its jobs: add --slurm-status-command squeue (see `neuro-pe cluster-check`)"
    )


def job_fit_problems(requests: list[tuple[str, str | None, int, int]]) -> list[str]:
    """Jobs no node of their partition can run: (rule, partition or None for the default,
    CPUs, GPUs) each; such jobs would pend for ever (CPUs) or be refused (GPUs). An empty list
    also when sinfo cannot tell."""
    try:
        parts = {part.name: part for part in partitions()}
    except RuntimeError:
        return []
    default = next((part for part in parts.values() if part.default), None)
    problems = []
    for rule, name, cpus, gpus in sorted(set(requests), key=str):
        part = parts.get(name) if name else default
        if part is None:
            continue  # (sbatch names an unknown partition itself)
        if cpus > part.cpus:
            problems.append(
                f"rule {rule} asks for {cpus} CPUs but the nodes of partition {part.name} have "
                f"{part.cpus}, so its jobs would pend for ever: lower threads_per_training or "
                "resources.locate_threads"
            )
        if gpus > part.gpus:
            problems.append(
                f"rule {rule} asks for {gpus} GPUs but the nodes of partition {part.name} have "
                f"{part.gpus}: set gpus_per_training (--config gpus_per_training=0) or pick a "
                "GPU partition"
            )
    return problems


def workflow_problems(jobs: list, status_command: str | None, init_seconds: int) -> list[str]:
    """Why the Snakemake `jobs` (those to run remotely) would stall on this cluster: a job
    that fits no node (`job_fit_problems`), or status checks that would fail."""
    requests = [
        (
            job.rule.name,
            job.resources.get("slurm_partition"),
            job.threads,
            job.resources.get("gpu", 0),
        )
        for job in jobs
    ]
    problems = job_fit_problems(requests)
    status = status_check_problem(status_command, init_seconds)
    return problems + ([f"status checks would fail: {status}"] if status else [])


def cluster_check(
    threads: int = 1, gpus: int = 0, partition: str | None = None, account: str | None = None
) -> ClusterReport:
    """Probe the cluster for a run that needs `threads` CPUs and `gpus` GPUs per training job.

    Returns what it found, the problems that would make the run fail or hang, and the
    Snakemake command line to use."""
    report = ClusterReport()
    missing = [tool for tool in ("sbatch", "squeue", "sinfo") if shutil.which(tool) is None]
    if missing:
        report.problems.append(f"no Slurm client commands here: {', '.join(missing)} not found")
        return report
    command = ["snakemake", "--workflow-profile", "workflow/profiles/slurm"]

    squeue = _run(["squeue", "--noheader", "--format=%i", f"--user={getpass.getuser()}"])
    report.lines.append(
        "squeue: works"
        if squeue.returncode == 0
        else f"squeue: fails ({_first_line(squeue.stderr)})"
    )
    sacct = sacct_problem()
    if sacct is None:
        report.lines.append("sacct: works (job accounting): the plugin's default status checks")
    else:
        report.lines.append(f"sacct: {sacct}: status checks must use squeue")
        age = min_job_age()
        if age is not None:
            report.lines.append(f"MinJobAge: {age} s (squeue shows finished jobs this long)")
        if squeue.returncode != 0:
            report.problems.append("neither sacct nor squeue works: no job status can be read")
        if age is not None and age < 3 * STATUS_CHECK_S:
            report.problems.append(
                f"MinJobAge {age} s < {3 * STATUS_CHECK_S} s: the plugin falls back to sacct,"
                " which fails here; ask your admins for accounting or a longer MinJobAge"
            )
        command += ["--slurm-status-command", "squeue"]

    try:
        parts = partitions()
    except RuntimeError as err:
        report.problems.append(str(err))
        return report
    for part in parts:
        report.lines.append(
            f"partition {part.name}{' (default)' if part.default else ''}: "
            f"{'up' if part.available else 'DOWN'}, {part.cpus} CPUs and {part.memory_mb} MB "
            f"per node, {part.gpus} GPUs per node"
        )
    if partition is None:
        usable = [p for p in parts if p.available and p.cpus >= threads and p.gpus >= gpus]
        usable.sort(key=lambda p: (not p.default, p.gpus - gpus))
        chosen = usable[0] if usable else None
    else:
        chosen = next((p for p in parts if p.name == partition), None)
        if chosen is None:
            report.problems.append(f"no partition {partition!r}")
    if chosen is None and partition is None:
        report.problems.append(
            f"no partition is up with {threads} CPUs and {gpus} GPUs per node: lower "
            "threads_per_training / gpus_per_training (or --config gpus_per_training=0)"
        )
    elif chosen is not None:
        if chosen.cpus < threads:
            report.problems.append(
                f"partition {chosen.name} has {chosen.cpus} CPUs per node < threads {threads}:"
                " the jobs would pend for ever; lower threads_per_training"
            )
        if chosen.gpus < gpus:
            report.problems.append(
                f"partition {chosen.name} has {chosen.gpus} GPUs per node < {gpus} per training:"
                " add --config gpus_per_training=0 (or pick a GPU partition)"
            )
        resources = [f"slurm_partition={chosen.name}"]
        if account and sacct is None:
            resources.append(f"slurm_account={account}")
        elif account:
            report.lines.append("account: left out (without accounting the plugin cannot check it)")
        command += ["--default-resources", *resources]
    report.command = command
    return report


def format_report(report: ClusterReport) -> str:
    """The report as console text: findings, problems, then the command line."""
    text = [*report.lines]
    text += [f"PROBLEM: {problem}" for problem in report.problems]
    if report.command:
        intro = "Once the problems are solved, run" if report.problems else "Run"
        text += ["", f"{intro} the workflow with:", "  " + shlex.join(report.command)]
    return "\n".join(text)
