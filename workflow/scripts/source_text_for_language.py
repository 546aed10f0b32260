import json

import numpy as np

from ramen.data.decontamination import key_digests, read_digests, remove_sentences, write_digests
from ramen.io import atomic_path
from ramen.data.text.keys import evaluation_keys
from ramen.workflow import logged

with logged(snakemake.log[0]):
    keys = evaluation_keys(snakemake.input.evaluation)
    stats = remove_sentences(snakemake.input.text, snakemake.output.text, keys)
    write_digests(snakemake.output.excluded, np.union1d(read_digests(snakemake.input.excluded), key_digests(keys)))
    print(json.dumps(stats, indent=2))
    with atomic_path(snakemake.output.stats) as tmp:
        tmp.write_text(json.dumps(stats, indent=2))
