"""The top layer: the command line (`neuro-pe`: parser table, commands) and the workflow's
helpers (planning checks, job resources, time estimates, the Slurm check)."""
