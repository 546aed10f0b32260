"""Stage 5, training. What every training loop shares, by concern: the update and the
learning-rate schedules (:mod:`.optimisation`), precision (:mod:`.precision`), checkpoints and run
ids (:mod:`.checkpoints`), several processes (:mod:`.distributed`), metric logs (:mod:`.metrics`)
and the step and epoch loops (:mod:`.loops`); masked-LM batches (:mod:`.batches`), training stages
(:mod:`.staging`) and bilingual training of an objective on the step loop (:mod:`.trainer`). The
stages the rules call and their multi-GPU launcher are in :mod:`ramen.pipeline`. Rules:
workflow/rules/init.smk, train.smk."""
