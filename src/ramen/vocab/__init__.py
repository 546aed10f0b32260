"""Stage 2, vocabularies: the foreign BPE (fastBPE) and subword-id encodings of text.
Rules: workflow/rules/vocab.smk."""
