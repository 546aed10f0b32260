"""The ecosystem's own measure agrees with ramen's: lm-evaluation-harness (``lm_eval``, HFLM) reading an
exported model directory gives, on a local-file rolling-loglikelihood task, the bits per byte that
ramen's language-modelling table gives for the same lines and context token (within 0.5 %, and
line by line).

The two protocols are made the same, not approximately alike:

- lm-eval's ``loglikelihood_rolling`` scores a text's tokens after ``prefix_token_id``, in disjoint
  windows: the first feeds the prefix token and the first ``max_length - 1`` tokens and scores
  ``max_length`` tokens; each later window feeds ``max_length`` tokens and scores the next
  ``max_length`` (or what is left, then with the earlier tokens as context). Its ``bits_per_byte``
  is the summed negative log-likelihood over every line divided by ln 2 and the lines' UTF-8 bytes:
  ramen's definition. ``add_bos_token=False`` encodes the text as ramen does, without the
  tokenizer's own special tokens (by default a tokenizer that prepends BOS would have it scored).
- ramen's window of ``max_length`` tokens counts the last scored token, which the model reads but
  whose prediction is unused: its ``max_length = M + 1, stride = M`` feeds the model exactly lm-eval's
  ``max_length = M`` inputs and scores the same tokens (``context_token`` is the prefix token).
  With a smaller stride (the default is half a window) ramen's later windows see more context.

Tiny models built here: a Llama-layout source saved as is, its French side with the vocabulary
replaced (``BilingualCausalLM.export_language``) and the source with the vocabulary extended
(``extend_tokenizer`` + ``initialise_new_rows`` + ``BilingualCausalLM.extended``). Their weights are drawn
wide enough that a token's prediction depends on its context, so a wrong prefix token fails the check.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import yaml

from ramen.initializers.extension import initialise_new_rows
from ramen.io import write_lines
from ramen.modeling.causal import BilingualCausalLM, ForeignTables
from ramen.modeling.sources import causal_lm_parts
from ramen.tasks.language_modeling import (
    LanguageModelSettings,
    bits_per_byte,
    context_token_id,
    evaluate_language_model,
    load_causal_lm,
)
from ramen.vocab.byte_bpe import train_byte_bpe
from ramen.vocab.extend import extend_tokenizer
from ramen.vocab.tokenizer import load_tokenizer

from conftest import french_lines
from tiny_decoder import ENGLISH, build_byte_tokenizer_dir

pytestmark = pytest.mark.slow

CONTEXT_TOKEN = "<|endoftext|>"
OTHER_TOKEN = "<|im_start|>"  # a wrong context token: its figures must fall outside the tolerance
WINDOW = 16  # lm-eval's max_length; ramen's window is one token more (see the module docstring)
TOLERANCE = 0.005  # relative
LONG = ("Le château de la forêt, où l'élève français a reçu sa leçon, était déjà très vieux en août ; "
        "aujourd'hui, la sœur du garçon y chante une œuvre naïve devant l'hôpital et le théâtre.")
LINES = ENGLISH[:4] + ["Le chat est sur le tapis, à côté de la fenêtre.", "Où est l'école ? Déjà là-bas, près du cœur.",
                       LONG, "Noël à l'île : été, hiver, château."]


def wide_llama(vocab_size: int, seed: int = 0):
    """A random LlamaForCausalLM (untied output layer) whose weights are wide enough (std 0.5) that its
    attention and predictions vary with the context, unlike the default near-uniform draw."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False, initializer_range=0.5, bos_token_id=0, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    """The three model directories: the source, a replaced vocabulary, an extended vocabulary."""
    root = tmp_path_factory.mktemp("lm_eval_parity")
    source_dir = build_byte_tokenizer_dir(root / "source", lines=ENGLISH + french_lines(50, seed=3), vocab_size=320)
    source_tokenizer = load_tokenizer(source_dir)
    source_lm = wide_llama(len(source_tokenizer))
    source_lm.save_pretrained(source_dir)

    corpus = root / "fr.txt"
    write_lines(corpus, french_lines(400))
    train_byte_bpe(corpus, source_dir, root / "fr_tokenizer", vocab_size=400)
    foreign_tokenizer = load_tokenizer(root / "fr_tokenizer")
    generator = torch.Generator().manual_seed(1)
    rows = len(foreign_tokenizer)
    tables = ForeignTables(0.5 * torch.randn(rows, 32, generator=generator),
                           0.5 * torch.randn(rows, 32, generator=generator))
    # Each model below wraps its own copy of the source (the same seed: the same weights).
    BilingualCausalLM(wide_llama(len(source_tokenizer)), "en", {"fr": tables}).export_language(
        "fr", foreign_tokenizer, root / "replaced")

    record = extend_tokenizer(source_dir, french_lines(400), root / "extended_tokenizer", new_tokens=40)
    extended_tokenizer = load_tokenizer(root / "extended_tokenizer")
    tables, _ = initialise_new_rows("random", causal_lm_parts(source_lm, source_tokenizer), source_tokenizer,
                                    extended_tokenizer, record, seed=2)
    BilingualCausalLM.extended(wide_llama(len(source_tokenizer)), tables, len(source_tokenizer),
                               ("en", "fr")).export_language("fr", extended_tokenizer, root / "extended")
    return {"source": source_dir, "replaced": root / "replaced", "extended": root / "extended"}


def lm_eval_run(model_dir, text_path, tmp_path, prefix_token_id: int) -> tuple[float, list[float]]:
    """lm-eval's bits per byte over ``text_path`` (one line a document) and each line's log-likelihood
    in nats, in file order, from a task YAML written here (what docs/decoders.md shows)."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    tasks = tmp_path / "lm_eval_tasks"
    tasks.mkdir()
    task = {
        "task": "ramen_lines",
        "dataset_path": "text",
        "dataset_kwargs": {"data_files": {"test": str(text_path)}, "cache_dir": str(tmp_path / "datasets")},
        "test_split": "test",
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "text",
        "metric_list": [{"metric": "bits_per_byte", "aggregation": "bits_per_byte", "higher_is_better": False}],
    }
    (tasks / "ramen_lines.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
    results = simple_evaluate(
        model="hf",
        # add_bos_token=False: the text is encoded without the tokenizer's own special tokens (its
        # template prepends <|endoftext|>, which would otherwise be scored as text), as ramen does.
        model_args={"pretrained": str(model_dir), "dtype": "float32", "max_length": WINDOW,
                    "prefix_token_id": prefix_token_id, "add_bos_token": False},
        tasks=["ramen_lines"], task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
        batch_size=1, device="cpu", bootstrap_iters=0, log_samples=True,
        random_seed=None, numpy_random_seed=None, torch_random_seed=None)
    samples = sorted(results["samples"]["ramen_lines"], key=lambda sample: sample["doc_id"])
    return results["results"]["ramen_lines"]["bits_per_byte,none"], [sample["bits_per_byte"][0] for sample in samples]


@pytest.mark.parametrize("variant", ["source", "replaced", "extended"])
def test_lm_eval_bits_per_byte_equals_ramen_s(variant, exported, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    model_dir = exported[variant]
    text_path = tmp_path / "lines.txt"
    write_lines(text_path, LINES)
    tokenizer = load_tokenizer(model_dir)
    lengths = [len(tokenizer(line, add_special_tokens=False)["input_ids"]) for line in LINES]
    # The long line spans several windows, the last one partial: lm-eval's windows roll.
    assert max(lengths) > 2 * WINDOW and max(lengths) % WINDOW, lengths

    settings = LanguageModelSettings(max_length=WINDOW + 1, stride=WINDOW, batch_size=4, context_token=CONTEXT_TOKEN)
    table = evaluate_language_model(model_dir, text_path, settings)  # the figures of ramen's table
    theirs, line_nats = lm_eval_run(model_dir, text_path, tmp_path, context_token_id(tokenizer, CONTEXT_TOKEN))
    print(f"{variant}: ramen {table['bits_per_byte']:.6f}, lm-eval {theirs:.6f} bits/byte, "
          f"relative difference {abs(theirs / table['bits_per_byte'] - 1):.2e}")
    assert len(line_nats) == table["lines"] == len(LINES)
    assert theirs == pytest.approx(table["bits_per_byte"], rel=TOLERANCE)

    # Line by line too, and the check can fail: conditioned on another token, ramen's figures leave
    # the tolerance (a random model's total moves less than its short lines do).
    model = load_causal_lm(model_dir)
    lm_eval_bits = [-nats / math.log(2) for nats in line_nats]
    for token in (CONTEXT_TOKEN, OTHER_TOKEN):
        line_settings = dataclasses.replace(settings, context_token=token)
        ours = [bits_per_byte(model, tokenizer, [line], line_settings)["bits"] for line in LINES]
        agree = all(a == pytest.approx(b, rel=TOLERANCE) for a, b in zip(lm_eval_bits, ours))
        assert agree == (token == CONTEXT_TOKEN), (token, lm_eval_bits, ours)
