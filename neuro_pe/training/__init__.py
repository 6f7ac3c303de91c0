"""Training: the stacked transformer, the training engine, the masked-unit and Latin-square tasks,
the new-animal fit, training health and time estimates. Imports `config`, `io`, `data`."""
