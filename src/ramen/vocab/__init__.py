"""Stage 2, vocabularies: the foreign BPE (fastBPE, or byte-level for a decoder source), a decoder
source's byte-level BPE extended with foreign tokens, and subword-id encodings of text.
Rules: workflow/rules/vocab.smk."""
