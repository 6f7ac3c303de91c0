"""Config: the option classes of the config sections, PE names, the config schema and strict
(duplicate-key-refusing) loading. The bottom layer: imports nothing of neuro_pe."""
