"""Config values that name files: local paths, downloads, archive members, model snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ramen.errors import ConfigError
from ramen.data.inputs import fetch_jobs, resolve, url_path, xnli_release_members

REPO = Path(__file__).resolve().parents[2]
DL = "results/downloads"


def test_paths_and_path_mappings_resolve_to_themselves():
    assert resolve("data/a.txt", DL) == "data/a.txt"
    assert resolve({"path": "data/a.txt", "format": "text"}, DL) == "data/a.txt"


def test_urls_resolve_under_host_and_path_without_query():
    url = "https://lindat.example.org/handle/11234/ud-treebanks-v2.4.tgz?sequence=4&isAllowed=y"
    assert url_path(url, DL) == f"{DL}/lindat.example.org/handle/11234/ud-treebanks-v2.4.tgz"
    assert resolve({"url": "https://dumps.wikimedia.org/frwiki/latest/frwiki.xml.bz2"}, DL) == (
        f"{DL}/dumps.wikimedia.org/frwiki/latest/frwiki.xml.bz2"
    )


def test_members_and_models():
    zipped = {"url": "https://dl.example.com/XNLI/XNLI-1.0.zip", "member": "XNLI-1.0/xnli.dev.tsv"}
    assert resolve(zipped, DL) == f"{DL}/dl.example.com/XNLI/XNLI-1.0.zip.d/XNLI-1.0/xnli.dev.tsv"
    local = {"path": "/data/XNLI-1.0.zip", "member": "XNLI-1.0/xnli.dev.tsv"}
    assert resolve(local, DL) == f"{DL}/local/data/XNLI-1.0.zip.d/XNLI-1.0/xnli.dev.tsv"
    assert resolve({"hf": "google-bert/bert-base-cased"}, DL) == f"{DL}/huggingface.co/google-bert/bert-base-cased"
    assert resolve({"hf": "FacebookAI/roberta-base", "revision": "v1"}, DL).endswith("roberta-base@v1")


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"url": "ftp://host/file.gz"}, "not an http"),
        ({"url": "https://host/dir/"}, "names no file"),
        ({"url": "https://host/a.gz", "path": "a.gz"}, "exactly one of"),
        ({"path": "a.zip", "sha256": "0" * 64}, "downloads only"),
        ({"url": "https://host/a.zip", "member": "../../etc/passwd"}, "cannot name a file"),
        ({"format": "text"}, "names no file"),
    ],
)
def test_bad_specs_name_the_setting(spec, message):
    with pytest.raises(ConfigError, match=rf"'corpora\.fr\[0\].*{message}"):
        resolve(spec, DL, "corpora.fr[0]")


def test_fetch_jobs_collects_downloads_members_and_models_once():
    archive = "https://host/ud.tgz"
    config = {
        "source": {"model": {"hf": "google-bert/bert-base-cased"}},
        "corpora": {"fr": [{"url": "https://host/fr.xml.bz2", "sha256": "a" * 64, "format": "wikipedia"},
                           {"path": "local.txt", "format": "text"}]},
        "ud": {"fr": {"train": {"url": archive, "member": "UD_French/train.conllu"},
                      "dev": {"url": archive, "member": "UD_French/dev.conllu"}}},
        "tasks": {"xnli": {"dev": {"fr": "local/dev.tsv"}}},
    }
    jobs = fetch_jobs(config, DL)
    assert jobs.files == {
        f"{DL}/host/fr.xml.bz2": {"url": "https://host/fr.xml.bz2", "sha256": "a" * 64},
        f"{DL}/host/ud.tgz": {"url": archive, "sha256": None},
    }
    assert jobs.members == {
        f"{DL}/host/ud.tgz.d/UD_French/train.conllu": {"archive": f"{DL}/host/ud.tgz", "member": "UD_French/train.conllu"},
        f"{DL}/host/ud.tgz.d/UD_French/dev.conllu": {"archive": f"{DL}/host/ud.tgz", "member": "UD_French/dev.conllu"},
    }
    assert jobs.models == {f"{DL}/huggingface.co/google-bert/bert-base-cased": {"hf": "google-bert/bert-base-cased", "revision": None}}
    assert len(jobs.outputs()) == 5


def test_conflicting_checksums_for_one_url_fail():
    config = {"a": {"url": "https://host/x.zip", "sha256": "a" * 64}, "b": {"url": "https://host/x.zip", "sha256": "b" * 64}}
    with pytest.raises(ConfigError, match="two different sha256"):
        fetch_jobs(config, DL)


def test_paper_config_resolves_every_input_of_the_paper():
    config = yaml.safe_load((REPO / "config" / "paper.yaml").read_text(encoding="utf-8"))
    jobs = fetch_jobs(config, config["download_dir"])
    urls = {job["url"] for job in jobs.files.values()}
    for lang in ("en", "fr", "ru", "ar", "zh", "hi", "vi"):
        assert f"https://dumps.wikimedia.org/{lang}wiki/latest/{lang}wiki-latest-pages-articles.xml.bz2" in urls
        assert f"https://dl.fbaipublicfiles.com/fasttext/vectors-wiki/wiki.{lang}.vec" in urls
    members = {job["member"] for job in jobs.members.values()}
    for treebank in ("en_ewt", "fr_gsd", "ru_syntagrus", "zh_gsd", "vi_vtb", "hi_hdtb", "ar_padt"):
        for split in ("train", "dev", "test"):
            assert any(member.endswith(f"/{treebank}-ud-{split}.conllu") for member in members)
    assert {"UNPC.en-fr.fr", "UNPC.ar-en.ar", "parallel/IITB.en-hi.hi", "OpenSubtitles.en-vi.vi"} <= members
    assert {job["hf"] for job in jobs.models.values()} == {
        "google-bert/bert-base-cased", "google-bert/bert-large-cased", "FacebookAI/roberta-base",
        "FacebookAI/roberta-large", "google-bert/bert-base-multilingual-cased",
    }
    # One UD archive, one XNLI release: each downloaded once however many files come from it.
    assert sum(url.startswith("https://lindat.mff.cuni.cz/") for url in urls) == 1


def test_configs_satisfy_the_schema_and_bad_specs_do_not():
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    schema = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
    for path in (REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml"):
        validate(yaml.safe_load(path.read_text(encoding="utf-8")), schema)
    config = yaml.safe_load((REPO / "config" / "paper.yaml").read_text(encoding="utf-8"))
    for bad in (
        {"url": "https://host/a.bz2", "path": "a.bz2", "format": "wikipedia"},  # both
        {"url": "https://host/a.bz2", "sha256": "not-hex", "format": "wikipedia"},
        {"url": "ftp://host/a.bz2", "format": "wikipedia"},
    ):
        config["corpora"]["fr"] = [bad]
        with pytest.raises(WorkflowError):
            validate(config, schema)


def test_text_byte_budget_is_one_number_or_one_per_language():
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    schema = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))
    for good in (None, 4_000_000_000, {"ru": 4_000_000_000, "fr": None}):
        config["text"]["max_bytes"] = good
        validate(config, schema)
    for bad in (0, "4GB", {"ru": 0}):
        config["text"]["max_bytes"] = bad
        with pytest.raises(WorkflowError):
            validate(config, schema)
    del config["text"]["max_bytes"]
    validate(config, schema)
    assert config["text"]["max_bytes"] is None  # the default fills it in


def test_the_xnli_release_is_downloaded_once_and_read_through_its_dev_and_test_members():
    jobs = fetch_jobs({"xnli_release": {"url": "https://example.org/XNLI-1.0.zip"}}, DL)
    assert list(jobs.files) == [f"{DL}/example.org/XNLI-1.0.zip"]
    assert sorted(job["member"] for job in jobs.members.values()) == ["XNLI-1.0/xnli.dev.tsv", "XNLI-1.0/xnli.test.tsv"]
    assert xnli_release_members("local/XNLI-1.0.zip")["dev"] == {"path": "local/XNLI-1.0.zip",
                                                               "member": "XNLI-1.0/xnli.dev.tsv"}
    assert xnli_release_members(None) == {} and fetch_jobs({}, DL).members == {}


def test_an_absolute_archive_member_is_refused_while_the_job_graph_is_built():
    """It was stripped of its "/" and extracted (ramen.data.download.extract_member took the
    archive's /abs/evil.txt for abs/evil.txt)."""
    spec = {"url": "https://host/x.tgz", "member": "/abs/evil.txt"}
    with pytest.raises(ConfigError, match=r"config setting 'corpora\.fr\[0\]\.member': '/abs/evil\.txt' is an "
                                          r"absolute name"):
        resolve(spec, DL, "corpora.fr[0]")
    with pytest.raises(ConfigError, match="cannot name a file under the download directory"):
        resolve({**spec, "member": "../evil.txt"}, DL, "corpora.fr[0]")


def test_each_download_is_named_by_the_config_key_that_gives_its_url():
    config = {"corpora": {"fr": [{"url": "https://host/fr.txt", "format": "text"}]},
              "tasks": {"ud": {"dev": {"fr": {"url": "https://host/ud.tgz", "member": "a/dev.conllu"}}}}}
    jobs = fetch_jobs(config, DL)
    assert jobs.settings[f"{DL}/host/fr.txt"] == "corpora.fr[0].url"
    assert jobs.settings[f"{DL}/host/ud.tgz"] == "tasks.ud.dev.fr.url"
    assert jobs.settings[f"{DL}/host/ud.tgz.d/a/dev.conllu"] == "tasks.ud.dev.fr"
