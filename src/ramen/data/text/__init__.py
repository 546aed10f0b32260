"""Raw text preparation, one module per concern, in the order text flows through them:

- :mod:`.scripts`: the supported languages (:data:`~.scripts.LANGUAGES`) and their scripts;
- :mod:`.normalise`: line normalisation;
- :mod:`.keys`: sentence keys (deduplication, decontamination) and the keys of evaluation files;
- :mod:`.sentences`: sentence splitting;
- :mod:`.wikipedia`: WikiExtractor and its output;
- :mod:`.sources`: corpus sources cut into work units, each read back as sentences;
- :mod:`.cleaning`: the cleaning of work units, in one process or several;
- :mod:`.sampling`: the lines kept (repeats, a seeded sample, a byte budget) copied to the output;
- :mod:`.corpus`: the entry points, :func:`~.corpus.prepare_monolingual` and
  :func:`~.corpus.prepare_parallel`.

Everything streams its input and writes its outputs atomically. Names with a leading underscore
are shared between these modules only.
"""
