"""The decoder table and plot of the report (ramen.reports.language_modeling)."""

from __future__ import annotations

import csv
import math

import pytest

from ramen.io import write_tsv
from ramen.reports.language_modeling import (
    SUMMARY_COLUMNS,
    initialisation_pairs,
    initialiser_rows,
    plot_summary,
    summary_rows,
    write_initialiser_table,
    write_summary,
)
from ramen.tasks.language_modeling import BPB_COLUMNS, SPEED_COLUMNS
from ramen.tasks.retrieval import RESULT_COLUMNS as RETRIEVAL_COLUMNS
from ramen.tasks.sib200 import RESULT_COLUMNS as SIB200_COLUMNS

VARIANTS = {"ramen": {"init": "parallel", "updates": 60}, "ramen-u0": {"init": "parallel", "updates": 0},
            "mean": {"init": "mean", "updates": 60}, "source": {"init": "none", "updates": None, "source": True}}
TEXTS = {"fr": "captions.fr", "en": "captions.en"}
OTHER = {"fr": "fra_Latn.test.tsv", "en": "eng_Latn.test.tsv"}


def scores(tmp_path, variant, fr, fr_other, en, fr_tokens=14.0):
    rows = [{"variant": variant, "lang": "fr", "text": TEXTS["fr"], "lines": 10, "bytes": 500, "tokens": 140,
             "tokens_per_line": fr_tokens, "bits": fr * 500, "bits_per_byte": fr},
            {"variant": variant, "lang": "fr", "text": OTHER["fr"], "lines": 10, "bytes": 900, "tokens": 300,
             "tokens_per_line": 30.0, "bits": fr_other * 900, "bits_per_byte": fr_other},
            {"variant": variant, "lang": "en", "text": TEXTS["en"], "lines": 10, "bytes": 480, "tokens": 120,
             "tokens_per_line": 12.0, "bits": en * 480, "bits_per_byte": en}]
    path = tmp_path / "lm" / f"{variant}_fr.tsv"
    path.parent.mkdir(exist_ok=True)
    write_tsv(path, rows, BPB_COLUMNS)
    return path


def speed(tmp_path, variant, fr, en):
    """A speed file of the French job: French decoded by the foreign side at ``fr`` bytes/s, English at ``en``."""
    rows = [{"variant": variant, "lang": lang, "text": TEXTS[lang], "prompts": 8, "new_tokens": 192,
             "bytes": round(rate * 4), "seconds": 4.0, "bytes_per_second": rate, "tokens_per_second": 48.0,
             "bytes_per_token": rate * 4 / 192, "threads": 2, "device": "cpu"} for lang, rate in (("fr", fr), ("en", en))]
    path = tmp_path / "lm" / f"{variant}_fr.speed.tsv"
    path.parent.mkdir(exist_ok=True)
    write_tsv(path, rows, SPEED_COLUMNS)
    return path


def test_each_column_comes_from_its_own_row_and_file(tmp_path):
    lm = [scores(tmp_path, "ramen", 1.6, 3.1, 1.5), scores(tmp_path, "ramen-u0", 2.05, 3.4, 1.49),
          scores(tmp_path, "mean", 1.9, 3.5, 1.52), scores(tmp_path, "source", 2.33, 1.96, 1.49, fr_tokens=22.8)]
    sib = tmp_path / "sib" / "ramen_fr.tsv"
    sib.parent.mkdir()
    write_tsv(sib, [{"variant": "ramen", "lang": "fr", "split": "test", "examples": 204, "accuracy": 0.5},
                    {"variant": "ramen", "lang": "en", "split": "test", "examples": 204, "accuracy": 0.75}],
              SIB200_COLUMNS)
    retrieval = tmp_path / "retrieval" / "ramen_fr.tsv"
    retrieval.parent.mkdir()
    write_tsv(retrieval, [{"variant": "ramen", "lang": "fr", "pairs": 100, "source_to_target": 0.2,
                           "target_to_source": 0.4}], RETRIEVAL_COLUMNS)
    rows = summary_rows(VARIANTS, "en", bits_per_byte=lm, texts=TEXTS, other_texts=OTHER, sib200=[sib],
                        retrieval=[retrieval])
    assert [row["variant"] for row in rows] == list(VARIANTS)  # the config's order, not the files'
    ramen, _, _, source = rows
    assert (ramen["bits_per_byte"], ramen["bits_per_byte_other"], ramen["bits_per_byte_source"]) == (1.6, 3.1, 1.5)
    assert ramen["tokens_per_line"] == 14.0 and ramen["tokens_per_line_source"] == 12.0
    assert (ramen["sib200"], ramen["sib200_source"]) == (0.5, 0.75)
    assert math.isclose(ramen["retrieval"], 0.3) and ramen["xnli"] is None
    assert source["updates"] is None and source["sib200"] is None and source["tokens_per_line"] == 22.8
    path = tmp_path / "summary.tsv"
    assert write_summary(rows, path) == 4
    with open(path, newline="", encoding="utf-8") as handle:
        written = list(csv.DictReader(handle, delimiter="\t"))
    assert tuple(written[0]) == SUMMARY_COLUMNS
    assert written[0]["bits_per_byte"] == "1.6000" and written[3]["updates"] == "" and written[0]["updates"] == "60"
    # Without speed files the speed columns are left empty.
    assert all(written[i][column] == "" for i in range(4)
               for column in ("bytes_per_second", "bytes_per_second_source", "speedup", "speedup_source"))


def test_speed_columns_and_the_ratio_to_the_source_model(tmp_path):
    lm = [scores(tmp_path, name, 2.0, 3.0, 1.5) for name in VARIANTS]
    timed = [speed(tmp_path, "ramen", 150.0, 90.0), speed(tmp_path, "ramen-u0", 120.0, 100.0),
             speed(tmp_path, "source", 60.0, 100.0)]  # mean: not timed
    rows = {row["variant"]: row for row in summary_rows(VARIANTS, "en", bits_per_byte=lm, texts=TEXTS,
                                                        other_texts=OTHER, speed=timed)}
    assert (rows["ramen"]["bytes_per_second"], rows["ramen"]["bytes_per_second_source"]) == (150.0, 90.0)
    assert rows["ramen"]["speedup"] == pytest.approx(2.5) and rows["ramen"]["speedup_source"] == pytest.approx(0.9)
    assert rows["ramen-u0"]["speedup"] == pytest.approx(2.0) and rows["ramen-u0"]["speedup_source"] == pytest.approx(1.0)
    assert rows["source"]["speedup"] == 1.0 and rows["source"]["speedup_source"] == 1.0
    assert all(rows["mean"][c] is None for c in ("bytes_per_second", "bytes_per_second_source", "speedup"))
    # The scores are those of the run without speed files: speed only adds its columns.
    alone = {row["variant"]: row for row in summary_rows(VARIANTS, "en", bits_per_byte=lm, texts=TEXTS,
                                                         other_texts=OTHER)}
    for name, row in rows.items():
        assert {k: v for k, v in row.items() if k in SUMMARY_COLUMNS[:14]} == {
            k: v for k, v in alone[name].items() if k in SUMMARY_COLUMNS[:14]}
    path = tmp_path / "summary.tsv"
    write_summary(list(rows.values()), path)
    with open(path, newline="", encoding="utf-8") as handle:
        written = {row["variant"]: row for row in csv.DictReader(handle, delimiter="\t")}
    assert written["ramen"]["speedup"] == "2.5000" and written["mean"]["speedup"] == ""
    # Without the source variant in the run there is no reference: bytes per second, no ratio.
    without = {name: spec for name, spec in VARIANTS.items() if name != "source"}
    [ramen, *_] = summary_rows(without, "en", bits_per_byte=lm[:3], texts=TEXTS, speed=timed[:2])
    assert ramen["bytes_per_second"] == 150.0 and ramen["speedup"] is None and ramen["speedup_source"] is None


def test_the_report_table_keeps_its_columns_and_adds_speed_at_the_end():
    assert SUMMARY_COLUMNS == (
        "variant", "lang", "init", "vocabulary", "output_init", "updates", "bits_per_byte", "bits_per_byte_other",
        "bits_per_byte_source", "bits_per_byte_source_other", "tokens_per_line", "tokens_per_line_source", "sib200",
        "sib200_source", "retrieval", "xnli", "bytes_per_second", "bytes_per_second_min", "bytes_per_second_max",
        "bytes_per_second_source", "speedup", "speedup_source")


def test_a_missing_held_out_row_and_a_stray_file_are_errors(tmp_path):
    path = scores(tmp_path, "ramen", 1.6, 3.1, 1.5)
    with pytest.raises(ValueError, match="no row for fr text other.fr"):
        summary_rows(VARIANTS, "en", bits_per_byte=[path], texts={"fr": "other.fr", "en": TEXTS["en"]})
    stray = scores(tmp_path, "rnd", 1.6, 3.1, 1.5)
    with pytest.raises(ValueError, match="rnd_fr.tsv: not a result file"):
        summary_rows(VARIANTS, "en", bits_per_byte=[stray], texts=TEXTS)


def test_update_zero_is_joined_to_its_trained_initialiser_only(tmp_path):
    lm = [scores(tmp_path, name, 2.0, 3.0, 1.5) for name in VARIANTS]
    rows = summary_rows(VARIANTS, "en", bits_per_byte=lm, texts=TEXTS, other_texts=OTHER)
    pairs = [(start["variant"], trained["variant"]) for start, trained in initialisation_pairs(rows)]
    assert pairs == [("ramen-u0", "ramen")]  # mean has no update-0 run, source is not trained
    plot_summary(rows, "en", tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"


def test_update_zero_is_joined_to_its_trained_run_of_the_same_vocabulary(tmp_path):
    variants = {"ramen": {"init": "parallel", "updates": 60, "vocabulary": "replace"},
                "ramen-u0": {"init": "parallel", "updates": 0, "vocabulary": "replace"},
                "ramen-ext": {"init": "parallel", "updates": 60, "vocabulary": "extend"},
                "ramen-ext-u0": {"init": "parallel", "updates": 0, "vocabulary": "extend"},
                "source": {"init": "none", "updates": None, "source": True, "vocabulary": None}}
    lm = [scores(tmp_path, name, 2.0, 3.0, 1.5) for name in variants]
    rows = summary_rows(variants, "en", bits_per_byte=lm, texts=TEXTS, other_texts=OTHER)
    assert {row["variant"]: row["vocabulary"] for row in rows}["ramen-ext"] == "extend"
    pairs = [(start["variant"], trained["variant"]) for start, trained in initialisation_pairs(rows)]
    assert pairs == [("ramen-u0", "ramen"), ("ramen-ext-u0", "ramen-ext")]
    plot_summary(rows, "en", tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"


EXTENSIONS = {"fvt-ext": {"init": "fvt", "updates": 60, "vocabulary": "extend", "output_init": "mean"},
              "fvt-ext-u0": {"init": "fvt", "updates": 0, "vocabulary": "extend", "output_init": "mean"},
              "fvt-in-u0": {"init": "fvt", "updates": 0, "vocabulary": "extend", "output_init": "input"},
              "pfvt-ext": {"init": "parallel_fvt", "updates": 60, "vocabulary": "extend", "output_init": "mean"},
              "ramen": {"init": "parallel", "updates": 60, "vocabulary": "replace"},
              "source": {"init": "none", "updates": None, "source": True}}


def test_update_zero_is_joined_to_the_trained_run_of_the_same_output_rows(tmp_path):
    lm = [scores(tmp_path, name, 2.0, 3.0, 1.5) for name in EXTENSIONS]
    rows = summary_rows(EXTENSIONS, "en", bits_per_byte=lm, texts=TEXTS, other_texts=OTHER)
    pairs = [(start["variant"], trained["variant"]) for start, trained in initialisation_pairs(rows)]
    assert pairs == [("fvt-ext-u0", "fvt-ext")]  # fvt-in-u0 starts from other output rows


def test_the_initialiser_table_sets_every_extension_start_against_the_source(tmp_path):
    lm = [scores(tmp_path, "fvt-ext", 1.0, 1.8, 1.515), scores(tmp_path, "fvt-ext-u0", 3.0, 2.2, 1.5),
          scores(tmp_path, "fvt-in-u0", 3.0, 2.0, 1.65), scores(tmp_path, "pfvt-ext", 0.9, 2.1, 1.5),
          scores(tmp_path, "ramen", 1.0, 3.0, 1.5), scores(tmp_path, "source", 2.5, 2.0, 1.5, fr_tokens=24.0)]
    timed = []
    for name, rate, low, high in (("fvt-ext", 80.0, 70.0, 90.0), ("source", 50.0, 45.0, 55.0)):
        path = speed(tmp_path, name, rate, 60.0)
        rows = [dict(row, bytes_per_second_min=low if row["lang"] == "fr" else 60.0,
                     bytes_per_second_max=high if row["lang"] == "fr" else 60.0, repeats=3)
                for row in csv.DictReader(open(path, encoding="utf-8"), delimiter="\t")]
        write_tsv(path, rows, SPEED_COLUMNS)
        timed.append(path)
    summary = summary_rows(EXTENSIONS, "en", bits_per_byte=lm, texts=TEXTS, other_texts=OTHER, speed=timed)
    assert {row["variant"]: row["bytes_per_second_min"] for row in summary}["fvt-ext"] == 70.0
    table = initialiser_rows(summary)
    # Extensions only, one row per start (initialiser, output rows), best trained FLORES first.
    assert [(row["init"], row["output_init"], row["variant"], row["variant_u0"]) for row in table] == [
        ("fvt", "mean", "fvt-ext", "fvt-ext-u0"), ("parallel_fvt", "mean", "pfvt-ext", None),
        ("fvt", "input", None, "fvt-in-u0")]
    fvt, pfvt, fvt_input = table
    assert fvt["bits_per_byte_other"] == pytest.approx(0.9) and fvt["u0_bits_per_byte_other"] == pytest.approx(1.1)
    assert fvt["bits_per_byte_source"] == pytest.approx(1.01) and fvt["u0_bits_per_byte"] == pytest.approx(1.2)
    assert fvt["tokens_per_line"] == 14.0 and fvt["tokens_per_line_source_model"] == 24.0
    assert (fvt["speedup"], fvt["speedup_min"], fvt["speedup_max"]) == pytest.approx((1.6, 1.4, 1.8))
    assert pfvt["speedup"] is None and pfvt["u0_bits_per_byte"] is None
    assert fvt_input["bits_per_byte"] is None and fvt_input["u0_bits_per_byte_source"] == pytest.approx(1.1)
    assert write_initialiser_table(table, tmp_path / "choice.tsv") == 3
    # Two update-0 variants of one start cannot both be its row.
    twice = dict(EXTENSIONS, **{"fvt-again-u0": dict(EXTENSIONS["fvt-ext-u0"])})
    lm.append(scores(tmp_path, "fvt-again-u0", 3.0, 2.2, 1.5))
    with pytest.raises(ValueError, match="two u0 variants of init fvt"):
        initialiser_rows(summary_rows(twice, "en", bits_per_byte=lm, texts=TEXTS, other_texts=OTHER))


def test_continuations_of_one_prompt_sit_together(tmp_path):
    from ramen.reports.language_modeling import gather_continuations
    from ramen.tasks.language_modeling import GENERATION_COLUMNS

    paths = []
    for variant in ("ramen", "source"):
        path = tmp_path / f"{variant}_fr.continuations.tsv"
        write_tsv(path, [{"variant": variant, "lang": lang, "prompt": prompt, "continuation": f"{variant} {prompt}"}
                         for lang, prompt in (("fr", "Un homme"), ("fr", "La capitale"), ("en", "A man"))],
                  GENERATION_COLUMNS)
        paths.append(path)
    out = tmp_path / "continuations.tsv"
    assert gather_continuations(paths, out) == 6
    with open(out, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert [(row["lang"], row["prompt"], row["variant"]) for row in rows] == [
        ("en", "A man", "ramen"), ("en", "A man", "source"), ("fr", "La capitale", "ramen"),
        ("fr", "La capitale", "source"), ("fr", "Un homme", "ramen"), ("fr", "Un homme", "source")]
    assert rows[0]["continuation"] == "ramen A man"


def test_the_loss_plot_leaves_out_runs_of_no_update(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from ramen.reports.summary import plot_mlm_losses

    trained, untrained = tmp_path / "ramen_fr.metrics.csv", tmp_path / "ramen-u0_fr.metrics.csv"
    trained.write_text("step,lr,loss_en,loss_fr\n5,0.001,4.5,6.0\n10,0.001,4.1,5.5\n", encoding="utf-8")
    untrained.write_text("step,lr\n", encoding="utf-8")
    panels = []
    real_subplots = plt.subplots
    monkeypatch.setattr(plt, "subplots", lambda rows, cols, **kw: (panels.append(cols), real_subplots(rows, cols, **kw))[1])
    plot_mlm_losses([untrained, trained], tmp_path / "loss.png")
    assert panels == [1] and (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"
