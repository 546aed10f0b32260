"""Stage 5, training: what every training loop shares (:mod:`.core`: the step and epoch loops,
updates, several processes, logs, checkpoints and run ids), masked-LM batches (:mod:`.batches`),
bilingual training of an objective on the step loop (:mod:`.trainer`), the stages the
rules call (:mod:`.stages`: head warm-up, foreign initialisation, bilingual training) and their
multi-GPU launcher (:mod:`.launch`). Rules: workflow/rules/init.smk, train.smk."""
