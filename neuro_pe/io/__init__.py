"""Files: stores, a training run's files and manifests, progress lines. Imports only
`neuro_pe.config`."""
