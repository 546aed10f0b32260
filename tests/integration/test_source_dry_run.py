"""A source that cannot be transferred fails the dry run, naming the setting and the file: each of
these passed `snakemake -n` and failed in the first jobs that read the source, or after training
had started (ramen.families.check_source, from ramen.workflow.graph_checks.check_run_inputs)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import build_source_dir
from test_config import REPO, SNAKEMAKE, demo_config, failing_dry_run, snakemake, workdir  # noqa: F401 (a fixture)
from tiny_decoder import build_tiny_decoder_dir, write_llama_gguf

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """A tiny masked LM (WordPiece tokenizer) and a tiny causal LM as one GGUF file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("sources")
    hf = build_tiny_decoder_dir(root / "causal")
    gguf = root / "tiny.gguf"
    write_llama_gguf(AutoModelForCausalLM.from_pretrained(hf), AutoTokenizer.from_pretrained(hf), gguf)
    return {"masked": build_source_dir(root / "masked"), "gguf": gguf}


def with_source(config: dict, path: Path) -> dict:
    config["source"]["model"] = str(path)
    return config


def decoder_config() -> dict:
    return yaml.safe_load((REPO / "config" / "demo-decoder.yaml").read_text(encoding="utf-8"))


def test_the_tiny_sources_pass_the_dry_run(workdir, sources):  # noqa: F811
    """The checks refuse what is broken, not these: each family with its own objective."""
    for config in (with_source(demo_config(), sources["masked"]), with_source(decoder_config(), sources["gguf"])):
        (workdir / "good.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        result = snakemake(workdir, "-n", "--configfile", str(workdir / "good.yaml"))
        assert result.returncode == 0, result.stderr[-3000:]


def test_an_encoder_decoder_source_is_refused_by_name(workdir, sources, tmp_path):  # noqa: F811
    from transformers import T5Config, T5ForConditionalGeneration

    t5 = tmp_path / "t5"
    shutil.copytree(sources["masked"], t5)
    T5ForConditionalGeneration(T5Config(vocab_size=200, d_model=16, d_ff=32, d_kv=8, num_layers=1,
                                        num_heads=2)).save_pretrained(t5)
    output = failing_dry_run(workdir, with_source(demo_config(), t5))
    assert f"config setting 'source.model': {t5 / 'config.json'}: 't5' is an encoder-decoder model" in output
    assert "Job stats" not in output


def test_a_model_directory_without_weights_fails_the_dry_run(workdir, sources, tmp_path):  # noqa: F811
    bare = tmp_path / "bare"
    shutil.copytree(sources["masked"], bare)
    (bare / "model.safetensors").unlink()
    output = failing_dry_run(workdir, with_source(demo_config(), bare))
    assert f"config setting 'source.model': {bare} holds config.json but no weights" in output


def test_a_gguf_file_cut_in_half_fails_the_dry_run(workdir, sources, tmp_path):  # noqa: F811
    cut = tmp_path / "cut.gguf"
    whole = sources["gguf"].read_bytes()
    cut.write_bytes(whole[: len(whole) // 2])
    output = failing_dry_run(workdir, with_source(decoder_config(), cut))
    assert f"config setting 'source.model': {cut} ends before the data of tensor" in output
    assert "download it again" in output and "reshape" not in output


def test_a_causal_objective_on_a_masked_lm_names_the_variant(workdir, sources):  # noqa: F811
    config = with_source(demo_config(), sources["masked"])
    config["variants"]["ramen-mono"] = {**config["variants"]["ramen"], "objective": "clm"}
    output = failing_dry_run(workdir, config)
    assert ("config setting 'variants.ramen-mono.objective': objective 'clm' trains a causal LM but the source "
            f"(source.model: {sources['masked'] / 'config.json'}) is a masked LM") in output


def test_a_masked_lm_tokenizer_without_a_mask_token_fails_the_dry_run(workdir, sources, tmp_path):  # noqa: F811
    source = tmp_path / "nomask"
    shutil.copytree(sources["masked"], source)
    settings = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    del settings["mask_token"]
    (source / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    output = failing_dry_run(workdir, with_source(demo_config(), source))
    assert (f"config setting 'source.model': the tokenizer of {source / 'tokenizer.json'} defines no mask token"
            in output)


def with_extension(config: dict) -> dict:
    # The decoder demo's variants all extend: a replacing RAMEN beside them, as the encoder demo has.
    config["variants"].setdefault("ramen", {"init": "parallel", "objective": "clm"})
    config["variants"]["ramen-ext"] = {**config["variants"]["ramen"], "vocabulary": "extend"}
    return config


def test_an_extended_vocabulary_plans_its_own_tokenizer_alignment_and_text(workdir, sources):  # noqa: F811
    """vocabulary: extend: the source's tokenizer extended, the parallel text aligned in its ids and
    every side's text encoded with it, beside the replacing variant's own chain."""
    config = with_extension(with_source(decoder_config(), sources["gguf"]))
    config["targets"] = {**config["targets"], "bits_per_byte": ["ramen", "ramen-ext"], "sib200": []}
    (workdir / "ext.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    result = snakemake(workdir, "-n", "--configfile", str(workdir / "ext.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    planned = result.stdout + result.stderr
    # One rule per step, its {vocabulary} wildcard telling the two chains apart: each foreign language
    # once in its own vocabulary and once in the extended one, whose text is every side's (English too).
    languages = len(config["languages"])
    jobs = {"extend_vocabulary": languages, "learn_bpe": languages, "encode_monolingual": 1 + 3 * languages,
            "encode_parallel": 2 * languages, "align": 2 * languages, "translation_probabilities": 2 * languages}
    for rule, count in jobs.items():
        assert re.search(rf"^{rule}\s+{count}\b", planned, re.MULTILINE), (rule, count, planned[-3000:])
    for lang in config["languages"]:
        for path in (f"results/encoded/en.extended-{lang}", f"results/encoded/{lang}.extended-{lang}",
                     f"results/encoded/{lang}", f"results/align/en-{lang}.extended/alpha.npz",
                     f"results/align/en-{lang}/alpha.npz"):
            assert re.search(rf"output: (.*, )?{re.escape(path)}(,|$)", planned, re.MULTILINE), (path, planned[-3000:])


def test_an_extended_vocabulary_on_a_masked_lm_names_the_variant(workdir, sources):  # noqa: F811
    output = failing_dry_run(workdir, with_extension(with_source(demo_config(), sources["masked"])))
    assert ("config setting 'variants.ramen-ext.vocabulary': vocabulary 'extend' is not offered for a masked LM "
            f"source (source.model: {sources['masked'] / 'config.json'})") in output


def test_an_extended_vocabulary_of_a_sentencepiece_bpe_without_byte_fallback_is_refused(workdir, tmp_path):  # noqa: F811
    source = build_tiny_decoder_dir(tmp_path / "spm")
    spec = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    # SentencePiece-style (spaces read as '▁'), but a character outside the vocabulary becomes <unk>
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    spec["model"]["byte_fallback"] = False
    (source / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    output = failing_dry_run(workdir, with_extension(with_source(decoder_config(), source)))
    # the first extending variant in the (sorted) config file is named
    assert re.search(rf"config setting 'variants\.[a-z]+-ext(?:-u0)?\.vocabulary': {re.escape(str(source / 'tokenizer.json'))}: "
                     "the source tokenizer is a SentencePiece-style BPE without byte_fallback", output), output[-2000:]
    assert "use 'replace' for this source" in output


def test_an_extended_vocabulary_without_new_rows_is_refused(workdir, sources):  # noqa: F811
    config = with_source(decoder_config(), sources["gguf"])
    config["variants"]["source-ext"] = {"init": "none", "vocabulary": "extend"}
    output = failing_dry_run(workdir, config)
    assert "config setting 'variants.source-ext.vocabulary': init 'none' builds no new rows" in output


TOY_FAMILY = '''"""A toy family: a masked LM that declares itself a ToyLM. Its stages are the masked LM's; its
vocabulary says which family learned it."""

from ramen.families.masked_lm import bilingual_model, load_source, prepare_source, source_parts, special_ids
from ramen.families.masked_lm import learn_vocabulary as learn_masked_vocabulary


def learn_vocabulary(*args, **kwargs):
    return {**learn_masked_vocabulary(*args, **kwargs), "family": "toy-lm"}
'''


def test_a_registered_family_builds_its_dag_with_no_other_file_touched(sources, tmp_path):
    """One module of stages plus one registry entry: the job graph checks and plans a source of the new
    family, and the pipeline's functions run its stages, with no rule, schema or pipeline edit."""
    import filecmp

    from test_config import register

    copy = tmp_path / "ramen"
    for part in ("workflow", "src", "config"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (copy / "src" / "ramen" / "families" / "toy_lm.py").write_text(TOY_FAMILY, encoding="utf-8")
    register(copy / "src" / "ramen" / "families" / "__init__.py",
             'FAMILIES: Registry[FamilyEntry] = Registry("family", "source.model", {\n',
             '    "toy-lm": FamilyEntry("a toy LM", ("ForToyLM",), None, "ramen.families.toy_lm",\n'
             '                          tokens=("pad", "unk", "mask"), objectives="masked-lm", from_scratch=True),\n')
    changed = []
    for part in ("workflow", "src", "config"):
        pending = [filecmp.dircmp(REPO / part, copy / part, ignore=["__pycache__", "ramen.egg-info"])]
        while pending:
            compared = pending.pop()
            changed += [str(Path(compared.right) / name) for name in compared.diff_files + compared.right_only]
            pending += compared.subdirs.values()
    assert sorted(Path(path).relative_to(copy).as_posix() for path in changed) == [
        "src/ramen/families/__init__.py", "src/ramen/families/toy_lm.py"]

    toy = tmp_path / "toy-source"
    shutil.copytree(sources["masked"], toy)
    settings = json.loads((toy / "config.json").read_text(encoding="utf-8"))
    (toy / "config.json").write_text(json.dumps({**settings, "architectures": ["BertForToyLM"]}), encoding="utf-8")
    config = with_source(demo_config(), toy)
    config["variants"]["ramen-clm"] = {"init": "parallel", "objective": "clm"}
    work = tmp_path / "work"
    work.mkdir()
    (work / "resources").symlink_to(REPO / "resources")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(copy / "src")}

    def dry_run(config: dict) -> subprocess.CompletedProcess:
        (tmp_path / "toy.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        return subprocess.run(
            [str(SNAKEMAKE), "--snakefile", str(copy / "workflow" / "Snakefile"), "--directory", str(work),
             "--cores", "1", "-n", "--configfile", str(tmp_path / "toy.yaml")],
            capture_output=True, text=True, env=env, timeout=600)

    # The entry decides what the family trains: a causal objective is refused as for a masked LM.
    result = dry_run(config)
    assert result.returncode != 0
    assert ("config setting 'variants.ramen-clm.objective': objective 'clm' trains a causal LM but the source "
            f"(source.model: {toy / 'config.json'}) is a toy LM") in result.stdout + result.stderr
    del config["variants"]["ramen-clm"]
    result = dry_run(config)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert re.search(r"^train_bilingual\s+\d+$", output, re.MULTILINE) and "results/models/source" in output

    # The pipeline's functions run the new family's stages.
    probe = ("import sys; from ramen.families import source_entry; "
             "from ramen.pipeline.vocabulary import learn_foreign_vocabulary as learn; "
             "stats = learn(sys.argv[1], sys.argv[2], sys.argv[3] + '/tokenizer', sys.argv[3] + '/codes', merges=50, "
             "max_vocab_size=None, lowercase=None, min_symbol_count=1); "
             "print(stats['family'], source_entry(sys.argv[2]).load('prepare_source').__module__)")
    text = tmp_path / "fr.txt"
    text.write_text("le chat est sur la table\nun chien court dans le parc\n" * 20, encoding="utf-8")
    resolved = subprocess.run([sys.executable, "-c", probe, str(text), str(toy), str(tmp_path / "vocab")],
                              capture_output=True, text=True, env=env, timeout=300)
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    assert resolved.stdout.split() == ["toy-lm", "ramen.families.masked_lm"]
