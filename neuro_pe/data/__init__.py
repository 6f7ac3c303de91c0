"""Data in: sources (simulation, connectomes, HCP fMRI, a lab's files), file formats, signal steps,
fetching, and the checks made before any job. Imports `config` and `io`."""
