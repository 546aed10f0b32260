"""Stage 3, alpha = p(e|f), the mixing weights of each foreign subword over English ones.

* :mod:`.parallel`: from word alignments of parallel text (eflomal), RAMEN eq. 2;
* :mod:`.monolingual`: from word vectors alone, RAMEN eq. 3-4, with :mod:`.vectors` (fastText
  files), :mod:`.procrustes` (identical-string seeded Procrustes) and :mod:`.sparsemax`.

Rules: workflow/rules/alpha_parallel.smk, alpha_monolingual.smk."""
