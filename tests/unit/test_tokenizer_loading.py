"""ramen.vocab.tokenizer.load_tokenizer: the generic fast class by name, anything else through AutoTokenizer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from ramen.vocab.tokenizer import is_generic_fast_tokenizer, load_tokenizer

TEXTS = ["Le château où l'élève a mangé, déjà !", "the cat sat on the mat", "Привет мир 我爱你"]


def test_a_saved_tokenizer_loads_as_auto_tokenizer_would(foreign_tokenizer_dir, tiny_source_dir):
    for directory in (foreign_tokenizer_dir, tiny_source_dir):
        assert is_generic_fast_tokenizer(directory)
        ours, auto = load_tokenizer(directory), AutoTokenizer.from_pretrained(directory)
        assert type(ours) is type(auto)
        assert ours(TEXTS)["input_ids"] == auto(TEXTS)["input_ids"]
        assert ours.get_vocab() == auto.get_vocab() and ours.all_special_tokens == auto.all_special_tokens
        assert ours.model_max_length == auto.model_max_length


@pytest.mark.slow
def test_the_text_jobs_load_a_saved_tokenizer_without_torch(foreign_tokenizer_dir):
    # What encode_monolingual, encode_parallel and translation_probabilities run: importing torch
    # would cost each of those processes about 2 CPU-s.
    probe = ("import sys; from ramen.vocab.tokenizer import load_tokenizer; "
             f"tokenizer = load_tokenizer({str(foreign_tokenizer_dir)!r}); tokenizer(['Le chat.']); "
             "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "False"


def test_a_named_tokenizer_class_goes_through_auto_tokenizer(foreign_tokenizer_dir, tmp_path):
    directory = shutil.copytree(foreign_tokenizer_dir, tmp_path / "bert")
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "BertTokenizer"
    config_path.write_text(json.dumps(config))
    assert not is_generic_fast_tokenizer(directory)
    assert type(load_tokenizer(directory)).__name__ == "BertTokenizer"


def test_a_directory_without_tokenizer_json_is_not_taken_for_a_generic_one(foreign_tokenizer_dir, tmp_path):
    directory = shutil.copytree(foreign_tokenizer_dir, tmp_path / "no-json")
    (directory / "tokenizer.json").unlink()
    assert not is_generic_fast_tokenizer(directory)
    assert not is_generic_fast_tokenizer(tmp_path / "missing")
