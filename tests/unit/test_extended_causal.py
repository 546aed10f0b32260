"""A causal LM over an extended vocabulary: the new rows initialised by registered initialisers with
the source rows copied bit for bit, a first training stage that moves only the new rows and keeps
no optimiser state for the source's, and the export as one standard causal LM whose English
logits are the source's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from ramen.errors import ConfigError
from ramen.initializers.common import random_rows
from ramen.initializers.extension import initialise_new_rows
from ramen.initializers.overlap import shared_tokens
from ramen.modeling.causal import BilingualCausalLM, CausalBatch
from ramen.modeling.sources import causal_lm_parts
from ramen.training.staging import apply_stage, parse_stages, resolve, union_of_stages
from ramen.vocab.extend import extend_tokenizer
from ramen.vocab.tokenizer import load_tokenizer

from conftest import french_lines
from test_causal import tiny_causal_lm
from tiny_decoder import ENGLISH, build_byte_tokenizer_dir

# French words at line starts, so the source has them without a leading space and ``overlap``
# finds the new " maison"-style tokens spelled alike.
SOURCE_LINES = ENGLISH + ["maison", "chat", "jardin", "petit", "grande", "aujourd'hui"] * 2
LAYOUTS = ["llama-tied", "llama-untied", "phi-bias", "gpt2"]


@pytest.fixture(scope="module")
def extension(tmp_path_factory):
    root = tmp_path_factory.mktemp("extension")
    source_dir = build_byte_tokenizer_dir(root / "source", lines=SOURCE_LINES, vocab_size=300)
    record = extend_tokenizer(source_dir, french_lines(400), root / "extended", new_tokens=40)
    return load_tokenizer(source_dir), load_tokenizer(root / "extended"), record, root


@pytest.fixture(scope="module", params=LAYOUTS)
def source(request, extension):
    source_tokenizer = extension[0]
    model = tiny_causal_lm(request.param, len(source_tokenizer))
    return request.param, model, causal_lm_parts(model, source_tokenizer)


def tables_of(method, source, extension, seed=0, **inputs):
    source_tokenizer, extended_tokenizer, record, _ = extension
    return initialise_new_rows(method, source[2], source_tokenizer, extended_tokenizer, record, seed=seed,
                               inputs=inputs)


def assert_source_rows_kept(tables, parts, first):
    assert torch.equal(tables.embeddings[:first], parts.input_embeddings[:first])
    assert (tables.output is None) == parts.tied
    if tables.output is not None:
        assert torch.equal(tables.output[:first], parts.output_rows[:first])
    assert (tables.bias is None) == (parts.output_bias is None)
    if tables.bias is not None:
        assert torch.equal(tables.bias[:first], parts.output_bias[:first])


def test_mean_rows_are_the_mean_of_every_source_row(source, extension):
    _, _, parts = source
    first, new = len(extension[0]), len(extension[2]["new_ids"])
    tables, stats = tables_of("mean", source, extension)
    assert tables.embeddings.shape == (first + new, parts.input_embeddings.shape[1])
    assert_source_rows_kept(tables, parts, first)
    # The registry's mean: the mean of all source rows (not of the token's own pieces).
    expected = parts.input_embeddings[:first].mean(0)
    assert torch.allclose(tables.embeddings[first:], expected.expand(new, -1), atol=1e-6)
    if tables.output is not None:
        assert torch.allclose(tables.output[first:], parts.output_rows[:first].mean(0).expand(new, -1), atol=1e-6)
    if tables.bias is not None:
        assert torch.allclose(tables.bias[first:], parts.output_bias[:first].mean().expand(new), atol=1e-6)
    assert stats["new_rows"] == new and stats["supported_rows"] == new and stats["source_rows"] == first


def test_random_rows_are_seeded_draws(source, extension):
    _, _, parts = source
    first, new = len(extension[0]), len(extension[2]["new_ids"])
    tables, _ = tables_of("random", source, extension, seed=3)
    assert_source_rows_kept(tables, parts, first)
    dim = parts.input_embeddings.shape[1]
    drawn = random_rows(new, dim, torch.Generator().manual_seed(3), like=parts.input_embeddings)
    assert torch.equal(tables.embeddings[first:], drawn)
    if tables.output is not None:  # the same seeded draw over the output rows
        assert torch.equal(tables.output[first:], drawn)
    if tables.bias is not None:
        assert torch.equal(tables.bias[first:], torch.zeros(new))
    assert not torch.equal(tables_of("random", source, extension, seed=4)[0].embeddings[first:], drawn)


def test_overlap_copies_the_source_row_of_a_token_spelled_alike(source, extension):
    _, _, parts = source
    source_tokenizer, extended_tokenizer, record, _ = extension
    first = len(source_tokenizer)
    tables, _ = tables_of("overlap", source, extension)
    assert_source_rows_kept(tables, parts, first)
    new = extended_tokenizer.convert_ids_to_tokens(record["new_ids"])
    pairs = shared_tokens(new, [source_tokenizer.convert_ids_to_tokens(i) for i in range(first)],
                          extended_tokenizer.all_special_tokens)
    assert pairs, f"no new token is spelled like a source token: {new}"
    for f, e in pairs:
        assert torch.equal(tables.embeddings[first + f], parts.input_embeddings[e])
        if tables.output is not None:
            assert torch.equal(tables.output[first + f], parts.output_rows[e])
    unmatched = sorted(set(range(len(new))) - {f for f, _ in pairs})
    drawn = random_rows(len(new), parts.input_embeddings.shape[1], torch.Generator().manual_seed(0),
                        like=parts.input_embeddings)
    assert torch.equal(tables.embeddings[first:][unmatched], drawn[unmatched])


def test_parallel_mixes_source_rows_by_an_alpha_over_the_new_tokens(source, extension):
    """Alpha has a row per new token; the second row here is uniform over the token's own source
    pieces, so its row is the mean of its pieces' rows."""
    _, _, parts = source
    source_tokenizer, _, record, _ = extension
    first, new = len(source_tokenizer), len(record["new_ids"])
    pieces = record["tokens"][1]["source_ids"]
    rows = [0, 0] + [1] * len(pieces)
    cols = [5, 9] + pieces
    values = [0.25, 0.75] + [1 / len(pieces)] * len(pieces)
    alpha = sp.csr_matrix((values, (rows, cols)), shape=(new, first))
    tables, stats = tables_of("parallel", source, extension, alpha=alpha)
    assert_source_rows_kept(tables, parts, first)
    table = parts.input_embeddings
    assert torch.allclose(tables.embeddings[first], 0.25 * table[5] + 0.75 * table[9], atol=1e-6)
    assert torch.allclose(tables.embeddings[first + 1], table[pieces].mean(0), atol=1e-6)
    if tables.output is not None:
        assert torch.allclose(tables.output[first + 1], parts.output_rows[pieces].mean(0), atol=1e-6)
    if tables.bias is not None:
        assert torch.allclose(tables.bias[first + 1], parts.output_bias[pieces].mean(), atol=1e-6)
    drawn = random_rows(new, table.shape[1], torch.Generator().manual_seed(0), like=table)
    assert torch.equal(tables.embeddings[first + 2:], drawn[2:])  # no support: the random draw
    assert stats["aligned_rows"] == 2
    # An alpha over every id of the extended vocabulary is cut to the new tokens' rows.
    whole = sp.vstack([sp.csr_matrix((first, first)), alpha]).tocsr()
    assert torch.equal(tables_of("parallel", source, extension, alpha=whole)[0].embeddings, tables.embeddings)


def peer_inputs(method, extension):
    """The inputs of the initialisers that need more than alpha, built tinily."""
    from test_peer_initializers import FakeFastText

    source_tokenizer, extended_tokenizer, record, _ = extension
    new = extended_tokenizer.convert_ids_to_tokens(record["new_ids"])
    if method == "focus":  # auxiliary vectors of the new tokens
        generator = np.random.default_rng(0)
        return {"token_vectors": {token: generator.normal(size=8).astype(np.float32) for token in new}}
    if method == "wechsel":  # fastText look-alikes over one n-gram table
        words = [line.split()[0].lower() for line in SOURCE_LINES + french_lines(50)]
        english = FakeFastText(words, seed=5)
        foreign = FakeFastText(words)
        foreign.grams = english.grams
        return {"source_model": english, "foreign_model": foreign, "neighbors": 3, "refine_iterations": 0,
                "align_words": 100}
    if method == "monolingual":  # an alpha over the new tokens: the first new token's pieces, uniformly
        pieces = record["tokens"][0]["source_ids"]
        return {"alpha": sp.csr_matrix(([1 / len(pieces)] * len(pieces), ([0] * len(pieces), pieces)),
                                       shape=(len(new), len(source_tokenizer)))}
    return {"sizes": {"dim": 16, "layers": 1, "heads": 2}, "settings": {"steps": 2, "batch_size": 16,
                                                                       "warmup_steps": 1, "log_every": 1}}


@pytest.mark.parametrize("method", ["focus", "wechsel", "monolingual", "char2subword"])
def test_every_other_initialiser_builds_the_new_rows_over_the_new_tokens(method, source, extension):
    """The new rows are the registered initialiser's rows for the new tokens as a foreign
    vocabulary; a mixing initialiser builds untied output rows by the same mixture."""
    from ramen.initializers import get_entry
    from ramen.vocab.tokenizer import ordered_vocab

    _, _, parts = source
    source_tokenizer, extended_tokenizer, record, _ = extension
    first = len(source_tokenizer)
    inputs = peer_inputs(method, extension)
    tables, stats = tables_of(method, source, extension, **inputs)
    assert_source_rows_kept(tables, parts, first)
    bias = parts.output_bias if parts.output_bias is not None else torch.zeros(first)
    alone = get_entry(method)(parts.input_embeddings, bias, extended_tokenizer.convert_ids_to_tokens(
        record["new_ids"]), ordered_vocab(source_tokenizer), **{"alpha": None, **inputs},
        generator=torch.Generator().manual_seed(0), special_tokens=extended_tokenizer.all_special_tokens)
    assert torch.equal(tables.embeddings[first:], alone.embeddings)
    assert stats["supported_rows"] > 0
    if tables.output is not None and alone.mixture is not None and alone.mixture.weights is not None:
        weights = sp.csr_matrix(alone.mixture.weights)
        mixed = np.flatnonzero(np.diff(weights.indptr) > 0)
        assert len(mixed)
        expected = torch.from_numpy(weights[mixed].toarray().astype(np.float32)) @ parts.output_rows
        torch.testing.assert_close(tables.output[first:][mixed], expected)


def test_initialisers_that_do_not_apply_or_inputs_that_do_not_fit_are_refused(source, extension):
    source_tokenizer, extended_tokenizer, record, _ = extension
    with pytest.raises(ConfigError, match="initialiser .scratch. does not serve vocabulary: extend"):
        tables_of("scratch", source, extension)
    with pytest.raises(ConfigError, match="alpha has 3 rows"):
        tables_of("parallel", source, extension, alpha=sp.csr_matrix((3, len(source_tokenizer))))
    with pytest.raises(ConfigError, match=r"'variants\.<variant>\.vocabulary': vocab_extension.json's .* not those of "
                                          "the extended tokenizer"):
        initialise_new_rows("mean", source[2], source_tokenizer, extended_tokenizer,
                            {**record, "new_ids": record["new_ids"][:-1]}, seed=0)


def windows(vocab: int, count: int = 4, length: int = 12, seed: int = 0) -> CausalBatch:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (count, length + 1), generator=generator)
    return CausalBatch(ids[:, :-1], torch.ones(count, length, dtype=torch.long), ids[:, 1:].clone())


def test_a_first_stage_moves_only_the_new_rows_and_keeps_no_state_for_the_source(source, extension):
    layout, _, parts = source
    first = len(extension[0])
    tables, _ = tables_of("mean", source, extension)
    model = BilingualCausalLM.extended(tiny_causal_lm(layout, first), tables, first, ("en", "fr"))
    before = {name: param.detach().clone() for name, param in model.named_parameters()}
    stages = parse_stages([{"until": 3, "train": ["foreign_embeddings"]},
                           {"train": ["encoder", "head", "source_embeddings", "foreign_embeddings"]}])
    groups = model.parameter_groups()
    trainable = resolve(union_of_stages(stages), groups)
    assert {id(p) for p in trainable} == {id(p) for p in model.parameters()}
    optimizer = torch.optim.AdamW(trainable, lr=1e-2, weight_decay=0.1)
    new_ids = {id(p) for p in groups["foreign_embeddings"]}
    # Every new row of the layout is in the new-rows group: input, untied output, bias.
    assert len(new_ids) == 1 + (not parts.tied) + (parts.output_bias is not None)

    def step(number):
        apply_stage(stages, number, groups, trainable)
        optimizer.zero_grad(set_to_none=True)
        losses = model({"en": windows(first, seed=number), "fr": windows(model.vocabulary_size("fr"), seed=100 + number)})
        sum(losses.values()).backward()
        optimizer.step()

    for number in (1, 2, 3):
        step(number)
    after = dict(model.named_parameters())
    for name, value in before.items():
        if id(after[name]) in new_ids:
            assert not torch.equal(after[name], value), name
        else:  # every source parameter, its vocabulary rows included, bit for bit
            assert torch.equal(after[name], value), name
    assert {id(p) for p in optimizer.state} == new_ids
    for number in (4, 5):
        step(number)
    assert not torch.equal(model.lm.get_input_embeddings().weight, before["lm." + next(
        name for name, p in model.lm.named_parameters() if p is model.lm.get_input_embeddings().weight)])
    assert {id(p) for p in optimizer.state} == {id(p) for p in model.parameters()}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_export_is_one_causal_lm_whose_english_logits_are_the_source_s(layout, extension, tmp_path):
    from transformers import AutoModelForCausalLM

    source_tokenizer, extended_tokenizer, record, _ = extension
    first = len(source_tokenizer)
    source_lm = tiny_causal_lm(layout, first)
    parts = causal_lm_parts(source_lm, source_tokenizer)
    tables, _ = initialise_new_rows("random", parts, source_tokenizer, extended_tokenizer, record, seed=1)
    model = BilingualCausalLM.extended(tiny_causal_lm(layout, first), tables, first, ("en", "fr"))
    model.export_language("fr", extended_tokenizer, tmp_path / "out")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert exported.config.vocab_size == len(extended_tokenizer) == first + len(record["new_ids"])
    assert (exported.get_output_embeddings().weight is exported.get_input_embeddings().weight) == parts.tied
    assert torch.equal(exported.get_input_embeddings().weight, tables.embeddings)
    assert load_tokenizer(tmp_path / "out").get_vocab() == extended_tokenizer.get_vocab()
    # English as the source encodes it: the source's tokens keep their ids in the extended model.
    english = source_tokenizer(ENGLISH[:3], return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs = source_lm(**english).logits
        ours = exported(**english).logits
    torch.testing.assert_close(ours[..., :first], theirs, rtol=1e-5, atol=1e-5)
    # The model's own loss over both parts is the exported model's.
    batch = windows(model.vocabulary_size("fr"), seed=7)
    with torch.no_grad():
        loss = model({"fr": batch})["fr"]
        logits = exported(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.labels.reshape(-1))
    assert torch.allclose(loss, expected, atol=1e-5)


def test_a_source_with_more_rows_than_tokens_keeps_its_token_rows_and_drops_the_padding(extension, tmp_path):
    """Qwen-style sources pad their table past the tokenizer: the new ids follow the tokens, so the
    padding rows are neither source tokens nor new ones and the export leaves them out."""
    from transformers import AutoModelForCausalLM

    source_tokenizer, extended_tokenizer, record, _ = extension
    first = len(source_tokenizer)
    source_lm = tiny_causal_lm("llama-untied", first + 7)
    parts = causal_lm_parts(source_lm, source_tokenizer)
    tables, _ = initialise_new_rows("mean", parts, source_tokenizer, extended_tokenizer, record, seed=0)
    assert tables.embeddings.shape[0] == len(extended_tokenizer)
    BilingualCausalLM.extended(source_lm, tables, first).export_language("xx", extended_tokenizer, tmp_path / "out")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert exported.config.vocab_size == len(extended_tokenizer)
    ids = source_tokenizer(ENGLISH[:2], return_tensors="pt", padding=True)
    with torch.no_grad():
        torch.testing.assert_close(exported(**ids).logits[..., :first], source_lm(**ids).logits[..., :first],
                                   rtol=1e-5, atol=1e-5)


def test_extended_tables_that_are_not_the_source_s_are_refused(extension):
    source_tokenizer, extended_tokenizer, record, _ = extension
    first = len(source_tokenizer)
    source_lm = tiny_causal_lm("llama-tied", first)
    tables, _ = initialise_new_rows("mean", causal_lm_parts(source_lm, source_tokenizer), source_tokenizer,
                                    extended_tokenizer, record, seed=0)
    with pytest.raises(ConfigError, match="are not the source's"):
        BilingualCausalLM.extended(tiny_causal_lm("llama-tied", first, seed=1), tables, first)
    with pytest.raises(ConfigError, match="does not tie"):
        BilingualCausalLM.extended(tiny_causal_lm("llama-untied", first), tables, first)


@pytest.mark.slow
def test_the_export_generates_both_languages_where_ramen_is_not_importable(extension, tmp_path):
    source_tokenizer, extended_tokenizer, record, _ = extension
    first = len(source_tokenizer)
    source_lm = tiny_causal_lm("llama-untied", first)
    tables, _ = initialise_new_rows("mean", causal_lm_parts(source_lm, source_tokenizer), source_tokenizer,
                                    extended_tokenizer, record, seed=0)
    BilingualCausalLM.extended(source_lm, tables, first).export_language("xx", extended_tokenizer, tmp_path / "out")
    script = textwrap.dedent("""
        import importlib.util, sys
        from pathlib import Path
        sys.path = [p for p in sys.path if not (Path(p or ".") / "ramen" / "__init__.py").exists()]
        sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f)]
        if importlib.util.find_spec("ramen") is not None:
            raise SystemExit("ramen is importable")
        from transformers import AutoModelForCausalLM, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
        model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
        for text in ("The cat sits on", "La maison est petite et le jardin"):
            inputs = tokenizer(text, return_tensors="pt")
            out = model.generate(**inputs, max_new_tokens=5, do_sample=False)
            assert out.shape[1] > inputs["input_ids"].shape[1], out.shape
            print("GENERATED", max(inputs["input_ids"][0].tolist()), len(tokenizer))
    """)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-I", "-c", script, str(tmp_path / "out")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith("GENERATED")]
    assert len(lines) == 2
    assert int(lines[1][1]) >= first  # the French prompt reads new tokens
    assert int(lines[1][2]) == first + len(record["new_ids"])


TRAIN_SCRIPT = '''
import os, sys, time
from pathlib import Path
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from ramen.modeling.causal import BilingualCausalLM, ForeignTables, special_token_ids
from ramen.objectives.base import BatchShape, ObjectiveSettings
from ramen.objectives.causal import CausalLanguageModeling
from ramen.training import trainer as training
from ramen.training.distributed import is_main_process
from ramen.vocab.encode import load_stream
from ramen.vocab.tokenizer import load_tokenizer

STAGES = [{"until": 4, "train": ["foreign_embeddings"]},
          {"train": ["encoder", "head", "source_embeddings", "foreign_embeddings"]}]


def run(source, extended, tables, en, fr, out, step_delay=0.0, steps=10, distributed=False):
    torch.set_num_threads(1)
    if step_delay:  # slows the run down so that it can be killed mid-way; results do not change
        schedule = training.TrainSettings.learning_rate
        training.TrainSettings.learning_rate = lambda self, step: (time.sleep(step_delay), schedule(self, step))[1]
    settings = training.TrainSettings(steps=steps, batch_size=4, seq_len=16, peak_lr=1e-2, init_lr=1e-4,
                                      warmup_steps=2, log_every=1, checkpoint_every=1, keep_last=2, keep_every=4,
                                      stages=STAGES, threads=1, distributed=distributed)
    out = Path(out)
    saved = load_file(tables)
    model = BilingualCausalLM.extended(AutoModelForCausalLM.from_pretrained(source),
                             ForeignTables(saved["embeddings"], saved.get("output"), saved.get("bias")),
                             len(load_tokenizer(source)), ("en", "fr"))
    tokenizer = load_tokenizer(extended)
    streams = {"en": load_stream(en), "fr": load_stream(fr)}
    objective = CausalLanguageModeling.build(model, streams, {lang: special_token_ids(tokenizer) for lang in streams},
                                             BatchShape.of(settings), ObjectiveSettings())
    training.train(objective, settings, out / "checkpoints", out / "metrics.csv", progress=False)
    if distributed:
        print("world", torch.distributed.get_world_size())
    if is_main_process():
        model.export_language("fr", tokenizer, out / "model")


if __name__ == "__main__":  # under torchrun: every process trains its share of each batch
    run(*sys.argv[1:7], float(sys.argv[7]), int(sys.argv[8]) if len(sys.argv) > 8 else 10,
        int(os.environ.get("WORLD_SIZE", "1")) > 1)
'''


def training_inputs(extension, tmp_path):
    """A phi-layout source (untied output rows with a bias: every part exists), its mean-initialised
    extended tables, both corpora encoded with the extended tokenizer, and the training script."""
    from safetensors.torch import save_file

    from ramen.vocab.encode import encode_corpus

    source_tokenizer, extended_tokenizer, record, root = extension
    first = len(source_tokenizer)
    source_lm = tiny_causal_lm("phi-bias", first)  # untied output rows with a bias: every part exists
    source_lm.save_pretrained(tmp_path / "source")
    source_tokenizer.save_pretrained(tmp_path / "source")
    tables, _ = initialise_new_rows("mean", causal_lm_parts(source_lm, source_tokenizer), source_tokenizer,
                                    extended_tokenizer, record, seed=0)
    save_file({"embeddings": tables.embeddings, "output": tables.output, "bias": tables.bias},
              str(tmp_path / "tables.safetensors"))
    (tmp_path / "en.txt").write_text("\n".join(ENGLISH * 10) + "\n")
    (tmp_path / "fr.txt").write_text("\n".join(french_lines(200)) + "\n")
    for lang in ("en", "fr"):
        encode_corpus(extended_tokenizer, tmp_path / f"{lang}.txt", tmp_path / f"encoded_{lang}")
    script = tmp_path / "train_script.py"
    script.write_text(TRAIN_SCRIPT)
    args = [str(tmp_path / "source"), str(root / "extended"), str(tmp_path / "tables.safetensors"),
            str(tmp_path / "encoded_en"), str(tmp_path / "encoded_fr")]
    return source_lm, tables, script, args


@pytest.mark.slow
def test_staged_training_on_the_training_core_resumes_exactly_after_sigkill(extension, tmp_path):
    """English and French windows in the one vocabulary, on trainer.train with the causal objective:
    killed mid-way and resumed it ends where an uninterrupted run does, and up to update 4 only the
    new rows moved."""

    from transformers import AutoModelForCausalLM

    from test_decoder_training import checkpoint_tensors, kill_at_checkpoint, load_script, rows_of

    source_tokenizer, _, record, _ = extension
    first = len(source_tokenizer)
    source_lm, tables, script, args = training_inputs(extension, tmp_path)
    killed = tmp_path / "killed"
    kill_at_checkpoint(script, args, killed, 5, "model")

    module = load_script(script)
    module.run(*args, str(killed))
    module.run(*args, str(tmp_path / "straight"))
    columns = ("step", "lr", "loss_en", "loss_fr")
    straight_rows = rows_of(tmp_path / "straight" / "metrics.csv")
    assert [int(row["step"]) for row in straight_rows] == list(range(1, 11))
    assert [[row[c] for c in columns] for row in rows_of(killed / "metrics.csv")] == [
        [row[c] for c in columns] for row in straight_rows]
    ours = AutoModelForCausalLM.from_pretrained(killed / "model").state_dict()
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path / "straight" / "model").state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[key], theirs[key]) for key in theirs)

    start = source_lm.state_dict()
    at4 = checkpoint_tensors(tmp_path / "straight" / "checkpoints", 4)
    source_keys = [key for key in at4 if key.startswith("model.lm.")]
    assert source_keys and all(torch.equal(at4[key], start[key[len("model.lm."):]]) for key in source_keys)
    for name in ("new_embeddings", "new_output", "new_bias"):
        assert not torch.equal(at4[f"model.{name}"], {"new_embeddings": tables.embeddings, "new_output": tables.output,
                                                      "new_bias": tables.bias}[name][first:]), name
    # The optimiser state saved at update 4 holds the three new-row tensors and nothing else.
    run_dir = next(path.parent for path in (tmp_path / "straight" / "checkpoints").rglob("step-00000004"))
    state = torch.load(run_dir / "step-00000004" / "updates.pt", weights_only=True)["optimizer"]["state"]
    new = len(record["new_ids"])
    assert sorted(tuple(moments["exp_avg"].shape) for moments in state.values()) == sorted(
        [(new,), (new, tables.embeddings.shape[1]), (new, tables.embeddings.shape[1])])
    at8 = checkpoint_tensors(tmp_path / "straight" / "checkpoints", 8)
    assert not torch.equal(at8["model.lm.model.embed_tokens.weight"], start["model.embed_tokens.weight"])


@pytest.mark.slow
def test_two_processes_train_the_extended_model_as_one_does(extension, tmp_path):
    """torchrun with two CPU processes (gloo), across the new-rows-only stage's end: under DDP every
    part of the tables gets a gradient in each backward and a stage's frozen ones are dropped."""
    from transformers import AutoModelForCausalLM

    from test_decoder_training import checkpoint_tensors, load_script, rows_of

    source_lm, _, script, args = training_inputs(extension, tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             str(script), *args, str(tmp_path / "pair"), "0", "6"], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "world 2" in result.stdout, result.stdout[-3000:]
    load_script(script).run(*args, str(tmp_path / "single"), 0.0, 6)
    pair, single = rows_of(tmp_path / "pair" / "metrics.csv"), rows_of(tmp_path / "single" / "metrics.csv")
    assert [row["step"] for row in pair] == [row["step"] for row in single] == [str(step) for step in range(1, 7)]
    columns = ("loss_en", "loss_fr")
    np.testing.assert_allclose([[float(row[c]) for c in columns] for row in pair],
                               [[float(row[c]) for c in columns] for row in single], atol=1e-4)
    ours = AutoModelForCausalLM.from_pretrained(tmp_path / "pair" / "model").state_dict()
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path / "single" / "model").state_dict()
    for name in theirs:
        # Adam moves a weight whose gradient is near zero by up to the rate whatever its sign.
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-3, atol=1e-4)
    start = source_lm.state_dict()
    at4 = checkpoint_tensors(tmp_path / "pair" / "checkpoints", 4)
    assert all(torch.equal(at4[key], start[key[len("model.lm."):]]) for key in at4 if key.startswith("model.lm."))
