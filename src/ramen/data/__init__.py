"""Stage 1, inputs and text: downloads, input checks, corpus cleaning and decontamination, the
task file formats (CoNLL-U, NLI). Rules: workflow/rules/download.smk, text.smk."""
