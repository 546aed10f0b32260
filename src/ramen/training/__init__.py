"""Stage 5, training: the bilingual trainer with exact resume (:mod:`.trainer`), the stages the
rules call (:mod:`.stages`: head warm-up, foreign initialisation, bilingual training) and their
multi-GPU launcher (:mod:`.launch`). Rules: workflow/rules/init.smk, train.smk."""
