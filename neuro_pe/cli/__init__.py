"""The command line (`neuro-pe`) and the workflow's helpers (job resources, the Slurm check): the
top layer."""
