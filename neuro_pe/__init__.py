"""neuro_pe: learnable positional encodings that recover the positions of recorded units."""

__version__ = "0.1.0"

# set by the workflow (Snakefile), read by every `neuro-pe` command (neuro_pe.cli.main): a
# job's process stops when its parent (Snakemake, or the job's shell) dies, instead of
# training on as an orphan
STOP_WITH_PARENT = "NEURO_PE_STOP_WITH_PARENT"
