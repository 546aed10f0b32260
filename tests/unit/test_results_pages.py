"""Results pages: tables read from result files, the stamp, missing inputs, idempotence."""

import os

import pytest

from ramen.reports.results_pages import Stamp, headline_rows, main, write_pages

STAMP = Stamp(command="make results-pages", commit="0123abc", date="2026-12-01 23:00 UTC", machine="Linux, 2 CPUs")

COMPARISON = (
    "table\ttask\tlang\tvariant\tinit\tours\tpaper_model\tpaper_init\tpaper\tdifference\n"
    "1\txnli\tfr\tramen\tparallel\t45.0\tRAMEN base + BERT\tparallel\t79.2\t-34.2\n"
    "1\txnli\tfr\tsource\tnone\t38.5\t\t\t\t\n"
    "2\tud\tfr\tramen\tparallel\t36.6\tRAMEN base + BERT\tparallel\t77.0\t-40.4\n"
    "2\tud\tfr\tsource\tnone\t15.2\t\t\t\t\n"
    "3\txnli\tfr\trnd\trandom\t33.3\tRAMEN base + BERT\trandom\t70.1\t-36.8\n"
    "3\tud\tfr\trnd\trandom\t1.0\tRAMEN base + BERT\trandom\t71.0\t-70.0\n"
    "4\tud_supervised\tfr\tramen\tparallel\t57.8\tRAMEN base + BERT\tmonolingual\t92.2\t-34.4\n"
)
SUMMARY = ("variant\tlang\tsplit\taccuracy\tn\tsource\n"
           "ramen\tfr\ttest\t0.4500\t5010\tramen_fr.tsv\n"
           "rnd\tfr\ttest\t0.3333\t5010\trnd_fr.tsv\n")
UD = ("variant\tlang\tsplit\ttask\tmode\ttreebank\tepoch\tstep\tlas\tuas\tlas_all\tuas_all\twords\tsentences\t"
      "selected\ttrain_loss\n"
      "ramen\tfr\tdev\tud\tzero-shot\tfr_gsd\t1\t10\t0.3\t0.4\t0.3\t0.4\t100\t10\ttrue\t1.2\n"
      "ramen\tfr\ttest\tud\tzero-shot\tfr_gsd\t1\t10\t0.366\t0.463\t0.354\t0.45\t8832\t416\t\t\n")
RULE_BENCH = ("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
              "{s}\t0:00:10\t{rss}\t1\t1\t1\t0\t0\t50\t{cpu}\n")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def run_dir(tmp_path):
    results, benchmarks = tmp_path / "results", tmp_path / "benchmarks"
    write(results / "report/paper_comparison.tsv", COMPARISON)
    write(results / "report/xnli_summary.tsv", SUMMARY)
    write(results / "ud/ramen_fr.tsv", UD)
    write(results / "ud/ramen_fr.conllu", "# not a table\n")
    write(results / "report/objective_ablation.tsv",
          "objective\tlang\tparallel_xnli\tparallel_las\tvariants\nmlm\tfr\t45.0\t36.6\tramen\n")
    write(results / "report/peers_fr.tsv", "variant\tinit\tupdates\txnli\tlas\nwechsel\twechsel\t100\t41.2\t30.1\n")
    # Snakemake's per-rule records under results/, the scripts' saved output beside the scripts.
    write(results / "benchmarks/train_bilingual/ramen_fr.tsv", RULE_BENCH.format(s="300.5", rss="2048.0", cpu="290.0"))
    write(results / "benchmarks/train_bilingual/rnd_fr.tsv", RULE_BENCH.format(s="280.0", rss="1024.0", cpu="NA"))
    write(benchmarks / "results/bench_text.txt", "$ python benchmarks/bench_text.py\nclean large: 26.8 MB/s\n")
    return results, benchmarks


def test_headline_pairs_xnli_and_las_with_the_matching_paper_row():
    import csv
    import io

    rows = headline_rows(list(csv.DictReader(io.StringIO(COMPARISON), delimiter="\t")))
    by_variant = {row["variant"]: row for row in rows}
    assert set(by_variant) == {"ramen", "rnd", "source"}  # table 4 (supervised) is not a headline
    assert by_variant["ramen"] == {
        "variant": "ramen", "init": "parallel", "lang": "fr", "xnli": "45.0", "xnli_paper": "79.2", "las": "36.6",
        "las_paper": "77.0", "paper_row": "RAMEN base + BERT (parallel init)"}
    assert (by_variant["rnd"]["xnli_paper"], by_variant["rnd"]["las_paper"]) == ("70.1", "71.0")
    assert by_variant["source"]["xnli_paper"] == by_variant["source"]["paper_row"] == ""
    assert by_variant["source"]["las"] == "15.2"


def test_pages_hold_the_tables_of_the_result_files(tmp_path):
    results, benchmarks = run_dir(tmp_path)
    written = write_pages(results, benchmarks, tmp_path / "docs", STAMP)
    assert sorted(p.name for p in written) == ["README.md", "benchmarks.md", "char2subword.md", "decoder.md", "demo.md",
                                               "initialisers.md", "nmt.md", "objectives.md"]
    assert "| wechsel | wechsel | 100 | 41.2 | 30.1 |" in (tmp_path / "docs/initialisers.md").read_text(encoding="utf-8")
    demo = (tmp_path / "docs/demo.md").read_text(encoding="utf-8")
    assert "| ramen | parallel | fr | 45.0 | 79.2 | 36.6 | 77.0 | RAMEN base + BERT (parallel init) |" in demo
    assert "| ramen | fr | test | 45.0 | 5010 |" in demo  # fractions shown as percent
    assert "| rnd | fr | test | 33.3 | 5010 |" in demo
    # Only the test row of the UD file, in percent; the .conllu predictions are not a table.
    assert "| ramen | fr | fr_gsd | 36.6 | 46.3 | 35.4 | 45.0 | 8832 | 416 |" in demo
    assert demo.count("| ramen | fr | fr_gsd |") == 1
    assert "`results/ud/ramen_fr.tsv` (written " in demo and "conllu" not in demo
    objectives = (tmp_path / "docs/objectives.md").read_text(encoding="utf-8")
    assert "| mlm | fr | 45.0 | 36.6 | ramen |" in objectives
    bench = (tmp_path / "docs/benchmarks.md").read_text(encoding="utf-8")
    # Two jobs of one rule: wall seconds summed, the longest job, CPU seconds (NA counts as 0), peak RSS.
    assert "| train_bilingual | 2 | 580.5 | 300.5 | 290.0 | 2048.0 |" in bench
    assert "clean large: 26.8 MB/s" in bench and "bench_text.txt" in bench
    assert "| results |" not in bench  # saved script output is not a rule


def test_stamp_and_missing_inputs_name_what_produces_them(tmp_path):
    results, benchmarks = run_dir(tmp_path)
    write_pages(results, benchmarks, tmp_path / "docs", STAMP)
    for name in ("demo", "nmt", "README"):
        text = (tmp_path / f"docs/{name}.md").read_text(encoding="utf-8")
        assert "Generated by `make results-pages` at commit `0123abc` on 2026-12-01 23:00 UTC, on Linux, 2 CPUs." \
            in text
    nmt = (tmp_path / "docs/nmt.md").read_text(encoding="utf-8")
    assert "Not measured in this run: no `results/report/nmt_summary.tsv`. Produced by `make demo-nmt`" in nmt
    assert "## Inputs" not in nmt
    index = (tmp_path / "docs/README.md").read_text(encoding="utf-8")
    assert "| [BERT-fused translation](nmt.md) | 0 of 1 |" in index
    assert "| [Demo results](demo.md) | 3 of 8 |" in index


def test_rerunning_rewrites_pages_whole(tmp_path):
    results, benchmarks = run_dir(tmp_path)
    out = tmp_path / "docs"
    write_pages(results, benchmarks, out, STAMP)
    first = {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()}
    write_pages(results, benchmarks, out, STAMP)
    assert {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()} == first
    # A new result replaces the old table; the old figure does not stay beside it.
    write(results / "report/xnli_summary.tsv", SUMMARY.replace("0.4500", "0.4620"))
    write_pages(results, benchmarks, out, STAMP)
    demo = (out / "demo.md").read_text(encoding="utf-8")
    assert "| ramen | fr | test | 46.2 | 5010 |" in demo and "| ramen | fr | test | 45.0 |" not in demo
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_named_pages_are_rewritten_and_the_others_keep_their_stamp_and_index_row(tmp_path):
    results, benchmarks = run_dir(tmp_path)
    out = tmp_path / "docs"
    write_pages(results, benchmarks, out, STAMP)
    demo_before = (out / "demo.md").read_text(encoding="utf-8")
    write(results / "report/nmt_summary.tsv", "model\tbleu\nplain\t28.5\n")
    write(results / "report/xnli_summary.tsv", SUMMARY.replace("0.4500", "0.4620"))  # not asked for: not shown
    later = Stamp(command="make demo-nmt && make results-pages PAGES=nmt", commit="4567def",
                  date="2026-12-02 06:00 UTC", machine="Linux, 2 CPUs")
    written = write_pages(results, benchmarks, out, later, only=["nmt"])
    assert sorted(p.name for p in written) == ["README.md", "nmt.md"]
    nmt = (out / "nmt.md").read_text(encoding="utf-8")
    assert "| plain | 28.5 |" in nmt and "at commit `4567def`" in nmt
    assert (out / "demo.md").read_text(encoding="utf-8") == demo_before
    index = (out / "README.md").read_text(encoding="utf-8")
    assert "| [BERT-fused translation](nmt.md) | 1 of 1 |" in index
    assert "| [Demo results](demo.md) | 3 of 8 |" in index  # the demo page's row, as it was
    assert index.count("| [") == 7
    with pytest.raises(Exception, match="no results page named \\['nmtt'\\]"):
        write_pages(results, benchmarks, out, later, only=["nmtt"])


def test_command_line_stamps_its_command_and_a_real_commit(tmp_path, capsys):
    results, benchmarks = run_dir(tmp_path)
    out = tmp_path / "docs"
    cwd = os.getcwd()
    assert main(["--results", str(results), "--benchmarks", str(benchmarks), "--out", str(out),
                 "--command", "make results-pages"]) == 0
    text = (out / "demo.md").read_text(encoding="utf-8")
    assert "Generated by `make results-pages` at commit `" in text
    assert f"{os.cpu_count()} CPUs" in text
    assert str(out / "demo.md") in capsys.readouterr().out
    assert os.getcwd() == cwd


README = "# ramen\n\nintro\n\n{start}\nold table 44.6\n{end}\n\n## Next\n"


def test_readme_headline_block_is_replaced_and_the_rest_kept(tmp_path):
    from ramen.reports.results_pages import README_END, README_START

    results, benchmarks = run_dir(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(README.format(start=README_START, end=README_END), encoding="utf-8")
    args = ["--results", str(results), "--benchmarks", str(benchmarks), "--out", str(tmp_path / "docs/results"),
            "--readme", str(readme), "--command", "make results-pages"]
    assert main(args) == 0
    text = readme.read_text(encoding="utf-8")
    assert "old table 44.6" not in text
    assert text.startswith("# ramen\n\nintro\n\n" + README_START + "\n| variant | init | lang | XNLI |")
    assert text.endswith(README_END + "\n\n## Next\n")
    assert "| ramen | parallel | fr | 45.0 | 79.2 | 36.6 | 77.0 |" in text
    assert "Every table of the run: [docs/results/demo.md](docs/results/demo.md)." in text
    # Without results the block says what to run; without markers the README is refused, untouched.
    (results / "report/paper_comparison.tsv").unlink()
    assert main(args) == 0
    assert "No results in" in readme.read_text(encoding="utf-8") and "| ramen |" not in readme.read_text(encoding="utf-8")
    readme.write_text("# ramen\n", encoding="utf-8")
    with pytest.raises(ValueError, match="README.md: expected one"):
        main(args)
    assert readme.read_text(encoding="utf-8") == "# ramen\n"


def test_readme_keeps_the_rows_of_the_variants_its_config_targets(tmp_path):
    from ramen.reports.results_pages import README_END, README_START

    results, benchmarks = run_dir(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(README.format(start=README_START, end=README_END), encoding="utf-8")
    demo = tmp_path / "demo.yaml"
    demo.write_text("targets:\n  xnli: [ramen]\n  ud: [ramen, source]\n", encoding="utf-8")
    args = ["--results", str(results), "--benchmarks", str(benchmarks), "--out", str(tmp_path / "docs/results"),
            "--readme", str(readme), "--readme-config", str(demo), "--command", "make results-pages"]
    assert main(args) == 0
    rows = [line.split(" | ")[0] for line in readme.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    assert rows == ["| variant", "| ramen", "| source"]  # rnd ran in the same directory but is no target
    # The demo page keeps every row of the run.
    assert "| rnd | random | fr |" in (tmp_path / "docs/results/demo.md").read_text(encoding="utf-8")


def test_the_decoder_page_sets_each_variant_against_its_languages_source_on_the_extension_goals(tmp_path):
    from ramen.reports.decoder_page import extension_goals, update_0_goals

    table = tmp_path / "language_modeling.tsv"
    write(table, "variant\tlang\tinit\tvocabulary\tupdates\tbits_per_byte\tbits_per_byte_other\t"
                 "bits_per_byte_source\tbits_per_byte_source_other\ttokens_per_line\tbytes_per_second\n"
                 "fvt-ext\tel\tfvt\textend\t60\t1.0\t1.0\t1.47\t1.24\t10.0\t30.0\n"
                 "source\tel\tnone\t\t\t2.0\t2.0\t1.46\t1.24\t40.0\t10.0\n"
                 "ramen-ext\tfr\tparallel\textend\t60\t1.2\t1.9\t1.47\t1.30\t12.0\t60.0\n"
                 "ramen-ext-u0\tfr\tparallel\textend\t0\t2.4\t2.1\t1.46\t1.24\t12.0\t60.0\n"
                 "source\tfr\tnone\t\t\t2.5\t2.0\t1.46\t1.24\t24.0\t40.0\n")
    page = "\n".join(extension_goals([table]))
    # FLORES 0.95x, captions 0.48x, English +0.7 % and +4.8 %, bytes/token 2x, generation 1.5x
    assert ("| ramen-ext | fr | extend | 0.95× met | 0.48× met | 1.01× met | 1.05× not met | 2.00× met | 1.50× met |"
            in page), page
    # Each language against its own source: Greek FLORES 0.50x, generation 3x.
    assert "| fvt-ext | el | extend | 0.50× met | 0.50× met | 1.01× met | 1.00× met | 4.00× met | 3.00× met |" in page
    assert "ramen-ext-u0" not in page and "| source |" not in page  # trained variants only
    start = "\n".join(update_0_goals([table]))
    assert "| ramen-ext-u0 | fr | extend | 1.05× met | 1.00× met | 1.00× met |" in start, start
    assert "| ramen-ext |" not in start


def test_the_initialiser_table_says_plainly_whether_the_combination_beats_the_subword_mean(tmp_path):
    from ramen.reports.decoder_page import extension_initialisers

    table = tmp_path / "extension_initialisers.tsv"
    header = ("lang\tinit\toutput_init\tu0_bits_per_byte_other\tbits_per_byte\tbits_per_byte_other\t"
              "bits_per_byte_source_other\ttokens_per_line\ttokens_per_line_source_model\tspeedup\tspeedup_min\t"
              "speedup_max\n")
    write(table, header + "fr\tfvt\tmean\t1.2\t0.6\t1.1\t1.0\t15.8\t24.4\t1.4\t1.3\t1.5\n"
                          "fr\tparallel_fvt\tmean\t1.3\t0.55\t1.2\t1.0\t15.8\t24.4\t\t\t\n")
    page = "\n".join(extension_initialisers([table]))
    assert "best after training on the second held-out set: `fvt`" in page
    assert "(`parallel_fvt`) beats the subword mean on in-domain: 1.20× / 0.55× against `fvt`'s 1.10× / 0.60×" in page
    assert "| fr | fvt | mean | " in page and "| 15.8 (24.4) | 1.40× (1.30–1.50) |" in page
    write(table, header + "fr\tfvt\tmean\t1.2\t0.6\t1.1\t1.0\t15.8\t24.4\t\t\t\n"
                          "fr\tparallel_fvt\tmean\t1.3\t0.7\t1.2\t1.0\t15.8\t24.4\t\t\t\n")
    assert "does **not** beat the subword mean on either held-out set" in "\n".join(extension_initialisers([table]))


def test_the_sib200_table_reads_its_result_files(tmp_path):
    from ramen.reports.results_pages import _sib200

    sib = tmp_path / "sib200/ramen_fr.tsv"
    write(sib, "variant\tlang\ttask\tsplit\texamples\taccuracy\tselected_epoch\tdev_accuracy\n"
               "ramen\tfr\tsib200\ttest\t204\t0.5\t3\t0.75\nramen\ten\tsib200\ttest\t204\t0.625\t3\t0.75\n")
    table = "\n".join(_sib200([sib]))
    assert "| ramen | en | 62.5 | 204 | 3 | 75.0 |" in table and table.index("| en |") < table.index("| fr |")


def test_the_decoder_page_reads_the_decoder_demo_and_shows_its_plots(tmp_path):
    results, benchmarks = run_dir(tmp_path)
    decoder = results / "decoder-demo" / "results"
    write(decoder / "report/language_modeling.tsv",
          "variant\tlang\tinit\tupdates\tbits_per_byte\tbits_per_byte_other\tbits_per_byte_source\t"
          "bits_per_byte_source_other\ttokens_per_line\ttokens_per_line_source\tsib200\tsib200_source\tretrieval\txnli\n"
          "ramen\tfr\tparallel\t60\t1.5812\t3.3\t1.52\t1.99\t14.2\t12.7\t0.4216\t0.6\t0.25\t\n"
          "source\tfr\tnone\t\t2.3301\t1.96\t1.49\t1.97\t22.8\t12.7\t0.3\t0.65\t0.1\t\n")
    write(decoder / "report/continuations.tsv",
          "lang\tprompt\tvariant\tcontinuation\nfr\tUn homme\tramen\t en chemise bleue\n")
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
    (decoder / "report/language_modeling.png").write_bytes(png)
    out = tmp_path / "docs"
    write_pages(results, benchmarks, out, STAMP, only=["decoder"])
    page = (out / "decoder.md").read_text(encoding="utf-8")
    assert "| ramen | fr | parallel | 60 | 1.58 | 3.30 | 1.52 | 1.99 | 14.2 | 12.7 | 42.2 | 60.0 | 25.0 |" in page
    assert "| source | fr | none |  | 2.33 |" in page
    assert "XNLI" not in page  # no variant has an XNLI score: the column is left out
    assert "![Foreign against English bits per byte](decoder/language_modeling.png)" in page
    assert (out / "decoder" / "language_modeling.png").read_bytes() == png
    assert "| fr | Un homme | ramen |  en chemise bleue |" in page
    assert "Not measured in this run: no `decoder_benchmarks/*/*.tsv`" in page
    write(results / "decoder-demo" / "results" / "benchmarks" / "train_bilingual/ramen_fr.tsv",
          RULE_BENCH.format(s="600.0", rss="3000.0", cpu="590.0"))
    write_pages(results, benchmarks, out, STAMP, only=["decoder"])
    page = (out / "decoder.md").read_text(encoding="utf-8")
    assert "| train_bilingual | 1 | 600.0 | 600.0 | 590.0 | 3000.0 |" in page and "decoder-demo/results/benchmarks/train_bilingual/ramen_fr.tsv" in page
    # The training-loss plot was not made: its section names the target.
    assert "Not measured in this run: no `decoder/report/mlm_loss.png`" in page


def test_the_decoder_page_shows_each_initialiser_s_time_from_its_init_stats(tmp_path):
    import json

    results, benchmarks = run_dir(tmp_path)
    init = results / "decoder-demo" / "results" / "init"
    write(init / "distill-ext_fr.json", json.dumps({"method": "distill", "rows": 49160, "new_rows": 8,
                                                    "vocabulary": "extend", "seconds": 12.34}))
    write(init / "mean_fr.json", json.dumps({"method": "mean", "rows": 300}))  # stats from before timing
    out = tmp_path / "docs"
    write_pages(results, benchmarks, out, STAMP, only=["decoder"])
    page = (out / "decoder.md").read_text(encoding="utf-8")
    assert "## Time per initialiser" in page
    assert "| distill-ext_fr | distill | extend | 8 | 12.3 |" in page
    assert "| mean_fr | mean | replace | 300 |  |" in page
