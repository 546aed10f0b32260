"""ramen: transfer a pretrained English masked LM to a foreign language (RAMEN)."""

__version__ = "0.1.0"
