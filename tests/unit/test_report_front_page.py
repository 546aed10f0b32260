"""The Snakemake report's front page (workflow/report/workflow.rst) shows the headline table.

Rendered as `snakemake --report` renders it: Jinja2 with the report's settings, then docutils,
from the run's working directory.
"""

from pathlib import Path
from types import SimpleNamespace

import pytest

jinja2 = pytest.importorskip("jinja2")
docutils_core = pytest.importorskip("docutils.core")

from ramen.reports.results_pages import HEADLINE_COLUMNS  # noqa: E402

TEMPLATE = Path(__file__).resolve().parents[2] / "workflow/report/workflow.rst"


def render(files, config):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string(TEMPLATE.read_text(encoding="utf-8")).render(
        snakemake=SimpleNamespace(config=config), categories={}, files=files)
    return docutils_core.publish_parts(text, writer="html", settings_overrides={"halt_level": 2})["html_body"]


def record(path):
    return SimpleNamespace(target=Path(path).name, path=Path(path))


def test_front_page_shows_the_headline_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("results/report").mkdir(parents=True)
    Path("results/report/headline.tsv").write_text(
        "\t".join(HEADLINE_COLUMNS) + "\n" + "ramen\tparallel\tfr\t45.0\t79.2\t36.6\t77.0\tRAMEN base + BERT (parallel init)\n"
        "source\tnone\tfr\t38.5\t\t15.2\t\t\n", encoding="utf-8")
    Path("results/report/xnli_summary.tsv").write_text("variant\tlang\tsplit\taccuracy\nramen\tfr\ttest\t0.4500\n",
                                                       encoding="utf-8")
    html = render([record("results/report/xnli_summary.tsv"), record("results/report/headline.tsv")],
                  {"languages": ["fr", "vi"]})
    assert "to fr, vi and evaluated" in html
    assert "<th class=\"head\">xnli_paper</th>" in html
    assert "<td>79.2</td>" in html and "<td>RAMEN base + BERT (parallel init)</td>" in html
    assert "<td>0.4500</td>" not in html  # the summary is the fallback only


def test_front_page_falls_back_to_the_xnli_summary(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("results/report").mkdir(parents=True)
    Path("results/report/xnli_summary.tsv").write_text("variant\tlang\tsplit\taccuracy\nramen\tfr\ttest\t0.4500\n",
                                                       encoding="utf-8")
    html = render([record("results/report/xnli_summary.tsv")], {"languages": ["fr"]})
    assert "<td>0.4500</td>" in html and "xnli_paper" not in html
    # Without any result table the page is the description alone.
    assert "<table" not in render([], {"languages": ["fr"]})
