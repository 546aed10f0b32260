"""Dependency parsing: biaffine scoring, tree decoding and attachment scores."""
