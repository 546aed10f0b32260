"""char2subword: a character-level replacement for a subword embedding table.

The module (:mod:`.module`) composes a subword's embedding from its characters. It
is trained to approximate an embedding table (:mod:`.approximate`, with the losses
of :mod:`.losses` and the character noise of :mod:`.noise`), contextualised by a
character-level masked LM with the encoder frozen (:mod:`.pretrain`,
:mod:`.masking`), measured by neighbour precision (:mod:`.evaluate`) and used in
place of the table, fully or for unknown words only (:mod:`.modes`).
"""
