"""The graph-time check of the GGUF targets (rule export_gguf): a source whose architecture or layout
(ramen.modeling.gguf_layouts.layout_refusal, the writer's own check) ramen cannot write as GGUF, or a dtype it does not write, is refused while the job graph is built, not
after training. Torch-free, like the other graph checks (ramen.workflow.graph_checks)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ramen.data.checkpoint_headers import read_checkpoint
from ramen.errors import ConfigError
from ramen.glue import resolve_model_path
from ramen.modeling.gguf_layouts import DTYPE_SETTING, DTYPES, layout_refusal
from ramen.workflow.config_lookups import source_model

SOURCE_SETTING = "source.model"
# The tokenizer kinds a GGUF source may carry and ramen writes back (tokenizer.ggml.model).
GGUF_TOKENIZERS = ("gpt2", "llama")


def check_gguf_export(config: Mapping) -> None:
    """The GGUF settings and the source (its architecture; a GGUF source's tokenizer kind). A source
    still to be downloaded is checked by the export job itself."""
    dtype = config["gguf"]["dtype"]
    if dtype not in DTYPES:
        raise ConfigError(DTYPE_SETTING, f"'{dtype}' is not a GGUF dtype ramen writes",
                          f"one of {', '.join(DTYPES)}; quantise the f16 file with llama.cpp's llama-quantize")
    source, downloaded = source_model(config)
    if downloaded:
        return
    path = resolve_model_path(config["source"]["model"], SOURCE_SETTING)
    if not os.path.exists(path):
        return
    checkpoint = read_checkpoint(path, SOURCE_SETTING)
    refusal = layout_refusal(checkpoint.config)
    if refusal is not None:
        raise ConfigError(SOURCE_SETTING, f"{refusal} ({checkpoint.config_file})",
                          "leave the GGUF targets out for this source (results/gguf/...)")
    kind = (checkpoint.gguf_metadata or {}).get("tokenizer.ggml.model")
    if kind is not None and kind not in GGUF_TOKENIZERS:
        raise ConfigError(SOURCE_SETTING, f"the GGUF source's tokenizer kind '{kind}' has no GGUF writer in ramen",
                          f"GGUF export writes {', '.join(GGUF_TOKENIZERS)} tokenizers")
