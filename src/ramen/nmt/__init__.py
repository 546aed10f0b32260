"""Neural machine translation with a frozen BERT fused into every layer (Zhu et al., 2020)."""
