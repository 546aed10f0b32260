"""The rehearsal of config/paper-decoder.yaml (docs/rehearsal.md): its real code paths on a local mirror.

From an empty directory, through the one-node SLURM cluster of tools/slurm/start.sh:

    HF_ENDPOINT=http://127.0.0.1:8719 snakemake all --profile profiles/slurm \\
        --profile profiles/slurm-local-test --profile tests/rehearsal/profile \\
        --profile tests/rehearsal/profile-decoder --configfile config/rehearsal-decoder.yaml

with tests/rehearsal/mirror.py serving every URL of the config and, under the id of Qwen/Qwen2.5-0.5B,
a tiny Llama-layout causal LM with an untied output layer. The mirror, the SLURM arguments and the
checks of the jobs' submissions are those of tests/integration/test_rehearsal.py; this file is
apart so that pytest-xdist (``--dist loadfile``) runs it beside the encoder rehearsal.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import yaml
from test_rehearsal import (check_cluster_jobs_asked_sbatch_for_their_rule_resources, cuda_available, hub_env,
                            mirror, read_tsv, rehearsal_args, serve_mirror, targets, unit_interval)
from test_slurm import slurm_cluster, snakemake  # noqa: F401 (the cluster fixture)
from test_workflow import REPO, planned_jobs

pytestmark = pytest.mark.integration

REHEARSAL = REPO / "config" / "rehearsal-decoder.yaml"
GROUP_SIZES = REPO / "tests" / "rehearsal" / "profile-decoder"  # the group profile's component counts for one language


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with serve_mirror(tmp_path_factory.mktemp("mirror"), REHEARSAL) as mirror_config:
        yield mirror_config


@pytest.fixture(scope="module")
def rehearsal(slurm_cluster, served, tmp_path_factory):  # noqa: F811 (the cluster fixture)
    config, endpoint, _ = served
    workdir = tmp_path_factory.mktemp("rehearsal-decoder")
    started = time.monotonic()
    output = snakemake(workdir, "all", *rehearsal_args(config, GROUP_SIZES), env=hub_env(endpoint, workdir / "hf-home"))
    print(f"decoder rehearsal: snakemake all took {time.monotonic() - started:.0f} s")
    (workdir / "snakemake-all.log").write_text(output)
    return workdir, output, yaml.safe_load(config.read_text())


def served_lines(root: Path, url: str) -> int:
    """Lines of a file the mirror serves at ``url`` (a plain file, not an archive member)."""
    return len((root / url.split("/", 3)[3]).read_text(encoding="utf-8").splitlines())


def test_every_table_of_the_decoder_targets_is_well_formed(rehearsal, served):
    workdir, _, config = rehearsal
    results, source_lang, root = workdir / "results", config["source"]["lang"], served[2]
    sizes = mirror.SIZES
    task = config["tasks"]["language_modeling"]
    max_lines = task["settings"]["max_lines"]
    for lang in config["languages"]:
        # Bits per byte: each language's FLORES devtest member and its other text (Tatoeba), the
        # target read by the foreign side, English by the English side (the retention check).
        expected = {(side, Path(task[kind][side]["member" if kind == "text" else "url"]).name):
                    min(max_lines, sizes["sib200"]["test"] if kind == "text" else
                        served_lines(root, task[kind][side]["url"]))
                    for side in (lang, source_lang) for kind in ("text", "other_text")}
        for variant in targets(config, "bits_per_byte"):
            rows = read_tsv(results / "language_modeling" / f"{variant}_{lang}.tsv")
            assert {(row["lang"], row["text"]): int(row["lines"]) for row in rows} == expected, (variant, rows)
            for row in rows:
                assert row["variant"] == variant
                assert 0 < float(row["bits_per_byte"]) < math.inf and 0 < float(row["tokens_per_line"]) < math.inf, row
                assert int(row["bytes"]) > 0 and int(row["tokens"]) > 0
            continuations = read_tsv(results / "language_modeling" / f"{variant}_{lang}.continuations.tsv")
            assert sorted((row["lang"], row["prompt"]) for row in continuations) == sorted(
                (side, prompt) for side in (lang, source_lang) for prompt in task["prompts"][side]), continuations
            assert any(row["continuation"].strip() for row in continuations), continuations
        for variant in targets(config, "sib200"):
            rows = {row["lang"]: row for row in read_tsv(results / "sib200" / f"{variant}_{lang}.tsv")}
            assert set(rows) == {lang, source_lang}, rows
            assert all(int(row["examples"]) == sizes["sib200"]["test"] and unit_interval(row["accuracy"])
                       for row in rows.values()), rows
        for variant in targets(config, "retrieval"):
            (row,) = read_tsv(results / "retrieval" / f"{variant}_{lang}.tsv")
            assert int(row["pairs"]) == sizes["tatoeba"] and unit_interval(row["source_to_target"], row["target_to_source"])
        for variant in targets(config, "xnli"):
            rows = read_tsv(results / "xnli" / f"{variant}_{lang}.tsv")
            test = [row for row in rows if row["split"] == "test"]
            assert len(test) == 1 and test[0]["lang"] == lang and int(test[0]["n"]) == sizes["xnli"]["test"], rows
            assert unit_interval(test[0]["accuracy"])
    summary = read_tsv(results / "report" / "xnli_summary.tsv")
    assert {(row["variant"], row["lang"]) for row in summary if row["split"] == "test"} == {
        (variant, lang) for variant in targets(config, "xnli") for lang in config["languages"]}


def test_each_trained_foreign_side_is_a_causal_lm_with_its_own_output_layer(rehearsal):
    """The served source has an untied output layer: every exported foreign side keeps one, a
    standard AutoModelForCausalLM directory whose output rows are not its input rows."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    workdir, _, config = rehearsal
    trained = [name for name, variant in config["variants"].items() if variant["init"] != "none"]
    assert trained
    for variant in trained:
        for lang in config["languages"]:
            directory = workdir / "results" / "models" / f"{variant}_{lang}" / lang
            assert json.loads((directory / "config.json").read_text())["tie_word_embeddings"] is False, directory
            model = AutoModelForCausalLM.from_pretrained(directory)
            tokenizer = AutoTokenizer.from_pretrained(directory)
            embeddings, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
            assert embeddings.shape == head.shape and embeddings.shape[0] >= len(tokenizer), directory
            assert embeddings.data_ptr() != head.data_ptr() and not torch.equal(embeddings, head), directory
    # The source as the mirror serves it, untied too: the rehearsal's harder case.
    source = json.loads((workdir / "results" / "downloads" / "huggingface.co" / mirror.DECODER_MODEL_ID
                         / "config.json").read_text())
    assert config["source"]["model"] == {"hf": mirror.DECODER_MODEL_ID}
    assert source["architectures"] == ["LlamaForCausalLM"] and source["tie_word_embeddings"] is False


def test_an_extended_variant_is_one_model_over_the_source_s_tokens_and_new_ones(rehearsal):
    """vocabulary: extend: both sides are the same model, whose tokenizer keeps every source id and
    adds French tokens, and whose first rows at update 0 are the source's."""
    import filecmp

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    workdir, _, config = rehearsal
    extended = [name for name, variant in config["variants"].items() if variant.get("vocabulary") == "extend"]
    assert extended
    source_dir = workdir / "results" / "models" / "source"
    source_tokenizer = AutoTokenizer.from_pretrained(source_dir)
    source_rows = AutoModelForCausalLM.from_pretrained(source_dir).get_input_embeddings().weight
    for variant in extended:
        for lang in config["languages"]:
            sides = workdir / "results" / "models" / f"{variant}_{lang}"
            match, mismatch, errors = filecmp.cmpfiles(sides / lang, sides / config["source"]["lang"],
                                                       ["model.safetensors", "config.json", "tokenizer.json"],
                                                       shallow=False)
            assert len(match) == 3, (variant, mismatch, errors)
            tokenizer = AutoTokenizer.from_pretrained(sides / lang)
            assert len(tokenizer) > len(source_tokenizer)
            assert all(tokenizer.convert_tokens_to_ids(token) == index
                       for token, index in source_tokenizer.get_vocab().items())
            if variant.endswith("-u0"):
                rows = AutoModelForCausalLM.from_pretrained(sides / lang).get_input_embeddings().weight
                assert torch.equal(rows[:len(source_tokenizer)], source_rows[:len(source_tokenizer)]), variant


def test_inputs_came_from_the_mirror_in_their_real_formats(rehearsal):
    workdir, _, _ = rehearsal
    mirrored = workdir / "results" / "downloads" / "127.0.0.1"
    flores = mirrored / "dl.fbaipublicfiles.com" / "nllb" / "flores200_dataset.tar.gz"
    assert flores.read_bytes()[:2] == b"\x1f\x8b"  # gzip: the archive itself, its members unpacked beside it
    assert (flores.parent / "flores200_dataset.tar.gz.d" / "flores200_dataset" / "devtest"
            / "fra_Latn.devtest").stat().st_size > 0
    assert (mirrored / "dumps.wikimedia.org" / "frwiki" / "latest"
            / "frwiki-latest-pages-articles.xml.bz2").read_bytes()[:3] == b"BZh"
    assert (workdir / "results" / "downloads" / "huggingface.co" / mirror.DECODER_MODEL_ID
            / "model.safetensors").is_file()


def test_the_report_is_written(rehearsal, served):
    workdir, _, _ = rehearsal
    report = workdir / "results" / "report.html"
    snakemake(workdir, "--report", str(report), "all", "--configfile", str(served[0]),
              *([] if cuda_available() else ["--config", "device=cpu"]), env=hub_env(served[1], workdir / "hf-home"))
    assert report.stat().st_size > 10_000


def test_a_second_invocation_has_nothing_to_do(rehearsal, served):
    workdir, _, _ = rehearsal
    output = snakemake(workdir, "all", "-n", *rehearsal_args(served[0], GROUP_SIZES),
                       env=hub_env(served[1], workdir / "hf-home"))
    assert planned_jobs(output) == {}, output[-3000:]


def test_every_cluster_job_asked_sbatch_for_its_rule_resources(rehearsal):
    _, output, _ = rehearsal
    check_cluster_jobs_asked_sbatch_for_their_rule_resources(output)
