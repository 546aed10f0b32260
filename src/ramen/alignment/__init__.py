"""Stage 3, alpha = p(e|f), the mixing weights of each foreign subword over English ones.

* :mod:`.parallel`: from word alignments of parallel text, RAMEN eq. 2, made by :mod:`.aligners`
  (eflomal, seeded, or fast_align);
* :mod:`.monolingual`: from word vectors alone, RAMEN eq. 3-4, with :mod:`.vectors` (fastText
  files), :mod:`.procrustes` (identical-string seeded Procrustes) and :mod:`.sparsemax`.

Rules: workflow/rules/alpha_parallel.smk, alpha_monolingual.smk."""
