"""config/demo-decoder.yaml and the Makefile targets that run it (`make demo-decoder`, and
`make demo-decoder-xnli`, which adds XNLI targets to the same config)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from ramen.tasks.xnli import NliSettings
from ramen.glue import settings_from

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config" / "demo-decoder.yaml"


def demo_config() -> dict:
    return yaml.safe_load(CONFIG.read_text(encoding="utf-8"))


def test_the_decoder_demo_config_satisfies_the_schema():
    from snakemake.utils import validate

    validate(demo_config(), str(REPO / "workflow" / "schemas" / "config.schema.yaml"))


def test_the_xnli_and_sib200_targets_name_trained_variants_and_the_source_with_settings_and_files_that_exist():
    makefile = (REPO / "Makefile").read_text()
    found = re.search(r"^DECODER_TRAINED := (\[.*\])$", makefile, re.MULTILINE)
    assert found, "Makefile: DECODER_TRAINED names the variants of make demo-decoder-xnli and demo-decoder-sib200"
    assert """targets={"xnli": $(DECODER_TRAINED)}""" in makefile and """targets={"sib200": $(DECODER_TRAINED)}""" in makefile
    variants = json.loads(found.group(1))
    config = demo_config()
    assert variants and set(variants) <= set(config["variants"])
    trained = [v for v in variants if config["variants"][v].get("init") != "none"]
    assert set(trained) <= set(config["targets"]["bits_per_byte"])  # variants the demo trains
    assert all(config["variants"][v].get("training", {}).get("steps", 1) > 0 for v in trained)  # no update-0 runs
    # The bundled XNLI is French only: make demo-decoder-xnli runs French alone.
    assert set(config["tasks"]["xnli"]["test"]) == {"fr"} and """--config 'languages=["fr"]'""" in makefile
    sib200 = config["tasks"]["sib200"]
    assert set(sib200["test"]) == {"en", *config["languages"]}
    assert all((REPO / path).is_file() for split in ("train", "dev", "test") for path in sib200[split].values())
    xnli = config["tasks"]["xnli"]
    settings_from(NliSettings, xnli["settings"], "tasks.xnli.settings")
    files = [entry["path"] for entry in xnli["train"]] + list(xnli["dev"].values()) + list(xnli["test"].values())
    assert all((REPO / path).is_file() for path in files), files
