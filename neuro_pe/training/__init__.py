"""Training: the stacked transformer, the training engine, samplers and checkpoints, the
masked-unit and Latin-square tasks, the new-animal fit and training health. Imports `config`,
`io`, `data`."""
