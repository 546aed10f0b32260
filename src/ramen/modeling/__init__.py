"""The models: the bilingual masked LM (shared encoder, one table and tied output layer per
language), the ``ramen-bert`` architecture and its self-contained export."""
