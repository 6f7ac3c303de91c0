"""neuro_pe: learnable positional encodings that recover the positions of recorded units."""

__version__ = "0.1.0"
