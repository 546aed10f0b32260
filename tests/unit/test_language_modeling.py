"""Bits per byte, generated continuations and generation speed for causal LMs, on tiny Llama-layout models."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from ramen.errors import ConfigError, InputFormatError
from ramen.io import write_lines
from ramen.tasks.language_modeling import (
    LanguageModelSettings,
    bits_per_byte,
    decoding_speed,
    evaluate_language_model,
    evaluate_sides,
    generate_continuations,
    scoring_windows,
    write_bits_per_byte,
    write_continuations,
    write_speed,
)
from ramen.vocab.byte_bpe import train_byte_bpe
from ramen.glue import settings_from

from conftest import french_lines
from tiny_decoder import ENGLISH, build_tiny_decoder_dir, tiny_llama

TEXTS = ["The cat sits on the mat.", "Le chat est sur le tapis, à côté de la fenêtre.", "北京是中国的首都。", "A"]


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory):
    return build_tiny_decoder_dir(tmp_path_factory.mktemp("decoder") / "source", tie=False)


def _manual_bits(model, tokenizer, texts):
    """One unpadded forward per line, every token after BOS scored: the definition, spelt out."""
    nats = 0.0
    with torch.inference_mode():
        for text in texts:
            ids = [tokenizer.bos_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]]
            log_probs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
            nats += sum(log_probs[i - 1, ids[i]].item() for i in range(1, len(ids)))
    return -nats / math.log(2)


def test_a_uniform_model_costs_log2_of_the_vocabulary_per_token(source_dir):
    tokenizer = AutoTokenizer.from_pretrained(source_dir)
    model = tiny_llama(len(tokenizer))
    with torch.no_grad():
        model.model.norm.weight.zero_()  # the final norm outputs zeros: every logit is 0
    result = bits_per_byte(model, tokenizer, TEXTS)
    tokens = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in TEXTS)
    n_bytes = sum(len(t.encode()) for t in TEXTS)
    assert result["tokens"] == tokens and result["bytes"] == n_bytes
    assert result["bits_per_byte"] == pytest.approx(tokens * math.log2(len(tokenizer)) / n_bytes, rel=1e-6)


def test_bits_equal_the_definition_whatever_the_batch_and_padding(source_dir):
    tokenizer = AutoTokenizer.from_pretrained(source_dir)
    model = tiny_llama(len(tokenizer), tie=False, seed=3)
    expected = _manual_bits(model, tokenizer, TEXTS)
    for batch_size in (1, 3, 16):
        result = bits_per_byte(model, tokenizer, TEXTS, LanguageModelSettings(batch_size=batch_size))
        assert result["bits"] == pytest.approx(expected, rel=1e-5)
    assert result["bits_per_byte"] == pytest.approx(expected / sum(len(t.encode()) for t in TEXTS), rel=1e-5)


def test_long_lines_are_scored_in_windows_each_token_once():
    for length, max_length, stride in [(2, 4, 1), (10, 4, 2), (9, 4, 3), (100, 16, 8), (5, 8, 4)]:
        scored = []
        for begin, end, first in scoring_windows(length, max_length, stride):
            assert end - begin <= max_length and begin < first
            if begin > 0:
                assert first - begin >= max_length - stride
            scored += range(first, end)
        assert scored == list(range(1, length))


def test_windowed_scoring_equals_the_definition_with_truncated_context(source_dir):
    tokenizer = AutoTokenizer.from_pretrained(source_dir)
    model = tiny_llama(len(tokenizer), seed=4)
    text = " ".join(ENGLISH)
    ids = [tokenizer.bos_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]]
    settings = LanguageModelSettings(max_length=8, stride=3, batch_size=4)
    nats = 0.0
    with torch.inference_mode():
        for begin, end, first in scoring_windows(len(ids), 8, 3):
            log_probs = torch.log_softmax(model(input_ids=torch.tensor([ids[begin:end]])).logits[0].double(), -1)
            nats += sum(log_probs[i - begin - 1, ids[i]].item() for i in range(first, end))
    result = bits_per_byte(model, tokenizer, [text], settings)
    assert result["tokens"] == len(ids) - 1
    assert result["bits"] == pytest.approx(-nats / math.log(2), rel=1e-5)
    # Short context costs something: the one-window score differs.
    assert bits_per_byte(model, tokenizer, [text])["bits"] != pytest.approx(result["bits"], rel=1e-6)


def test_source_and_foreign_tokenizers_are_scored_on_the_same_bytes(tmp_path, source_dir):
    corpus = tmp_path / "fr.txt"
    write_lines(corpus, french_lines(300))
    train_byte_bpe(corpus, source_dir, tmp_path / "fr_tok", vocab_size=420)
    foreign = AutoTokenizer.from_pretrained(tmp_path / "fr_tok")
    source = AutoTokenizer.from_pretrained(source_dir)
    texts = french_lines(20, seed=5)
    model = tiny_llama(len(foreign), seed=1)
    on_foreign = bits_per_byte(model, foreign, texts)
    on_source = bits_per_byte(tiny_llama(len(source), seed=1), source, texts)
    assert on_foreign["bytes"] == on_source["bytes"]
    assert on_foreign["tokens"] < on_source["tokens"]
    # The source model read through the foreign tokenizer: ids beyond its table are refused.
    assert len(source) < len(foreign)
    with pytest.raises(InputFormatError, match="fr_tok: token id .* own language side"):
        bits_per_byte(tiny_llama(len(source)), foreign, texts)


def test_greedy_continuations_follow_the_argmax(source_dir):
    tokenizer = AutoTokenizer.from_pretrained(source_dir)
    model = tiny_llama(len(tokenizer), seed=2)
    prompt = "The cat"
    [continuation] = generate_continuations(model, tokenizer, [prompt], max_new_tokens=5)
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        for _ in range(5):
            next_id = model(input_ids=ids).logits[0, -1].argmax()
            if next_id.item() == tokenizer.eos_token_id:
                break
            ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
    start = len(tokenizer(prompt)["input_ids"])
    assert continuation == tokenizer.decode(ids[0, start:], skip_special_tokens=True)


def _greedy_without_eos(model, tokenizer, prompt, steps):
    """The new ids of greedy decoding with the end-of-sequence token never chosen, one forward per step."""
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    start = ids.shape[1]
    with torch.inference_mode():
        for _ in range(steps):
            logits = model(input_ids=ids).logits[0, -1]
            logits[tokenizer.eos_token_id] = -math.inf
            ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
    return ids[0, start:].tolist()


def test_decoding_speed_times_a_fixed_number_of_greedy_tokens_and_counts_their_bytes(source_dir):
    tokenizer = AutoTokenizer.from_pretrained(source_dir)
    model = tiny_llama(len(tokenizer), seed=2)
    prompts = ["The cat", "A dog runs in the park", "Le chat"]
    result = decoding_speed(model, tokenizer, prompts, new_tokens=6)
    assert result["prompts"] == 3 and result["new_tokens"] == 18
    decoded = [tokenizer.decode(_greedy_without_eos(model, tokenizer, prompt, 6), skip_special_tokens=True)
               for prompt in prompts]
    n_bytes = sum(len(text.encode("utf-8")) for text in decoded)
    assert result["bytes"] == n_bytes > 0
    assert result["bytes_per_token"] == pytest.approx(n_bytes / 18)
    assert result["seconds"] > 0 and result["bytes_per_second"] > 0
    assert result["bytes_per_second"] == pytest.approx(n_bytes / result["seconds"])
    assert result["tokens_per_second"] == pytest.approx(18 / result["seconds"])
    assert result["threads"] == torch.get_num_threads() and result["device"] == "cpu"
    with pytest.raises(ValueError, match="no prompt"):
        decoding_speed(model, tokenizer, ["", ""], new_tokens=6)


def test_a_model_that_would_stop_at_once_still_decodes_every_timed_token(source_dir):
    """Every model does the same decoding steps: end-of-sequence cannot end a timed prompt early."""
    tokenizer = AutoTokenizer.from_pretrained(source_dir)
    tokenizer.eos_token = "<|endoftext|>"  # id 0: the argmax of the all-zero logits below
    model = tiny_llama(len(tokenizer), seed=2)
    with torch.no_grad():
        model.model.norm.weight.zero_()
    assert generate_continuations(model, tokenizer, ["The cat"], max_new_tokens=5) == [""]
    result = decoding_speed(model, tokenizer, ["The cat", "Le chat"], new_tokens=5)
    assert result["new_tokens"] == 10
    # Only special tokens can follow (every logit is equal, the end of sequence is barred): no text.
    assert result["bytes"] == 0 and result["bytes_per_second"] == 0 and result["tokens_per_second"] > 0


def test_decoding_speed_repeats_every_prompt_and_reports_the_median_pass_and_its_spread(monkeypatch, source_dir):
    from ramen.tasks import language_modeling

    tokenizer = AutoTokenizer.from_pretrained(source_dir)
    model = tiny_llama(len(tokenizer), seed=2)
    # A clock that makes the three passes take 3, 1 and 2 s (two prompts each, after the untimed warm-up).
    ticks = iter([0, 1, 1, 3, 10, 10.5, 10.5, 11, 20, 21, 21, 22])
    monkeypatch.setattr(language_modeling.time, "perf_counter", lambda: next(ticks))
    result = decoding_speed(model, tokenizer, ["The cat", "Le chat"], new_tokens=3, repeats=3)
    assert result["repeats"] == 3 and result["new_tokens"] == 6 and result["seconds"] == 2
    n_bytes = result["bytes"]
    assert result["bytes_per_second"] == pytest.approx(n_bytes / 2)
    assert (result["bytes_per_second_min"], result["bytes_per_second_max"]) == pytest.approx((n_bytes / 3, n_bytes / 1))
    with pytest.raises(ValueError, match="repeats"):
        decoding_speed(model, tokenizer, ["The cat"], new_tokens=3, repeats=0)


def test_evaluate_from_directories(tmp_path, source_dir):
    text = tmp_path / "held_out.txt"
    write_lines(text, TEXTS)
    result = evaluate_language_model(source_dir, text, LanguageModelSettings(max_lines=3, max_new_tokens=3),
                                     prompts=["Le chat", "北京"])
    assert result["lines"] == 3 and len(result["continuations"]) == 2 and result["bits_per_byte"] > 0
    # A SIB-200 file is read for its sentences (FLORES-200 text), not its id and topic columns.
    sib = tmp_path / "test.tsv"
    sib.write_text("index_id\tcategory\ttext\n" + "".join(f"{i}\tsports\t{t}\n" for i, t in enumerate(TEXTS)))
    write_lines(tmp_path / "plain.txt", TEXTS)
    settings = LanguageModelSettings(max_new_tokens=1)
    assert evaluate_language_model(source_dir, sib, settings) == evaluate_language_model(
        source_dir, tmp_path / "plain.txt", settings)
    # Timing adds its own entry and changes no score; it decodes the first lines of the text.
    timed = evaluate_language_model(source_dir, text, LanguageModelSettings(max_new_tokens=2, speed_prompts=2),
                                    speed=True)
    assert timed.pop("speed")["new_tokens"] == 4
    assert timed == evaluate_language_model(source_dir, text, LanguageModelSettings(max_new_tokens=2))
    assert evaluate_language_model(source_dir, text, LanguageModelSettings(speed_prompts=0), speed=True)["speed"] is None


def test_settings_name_the_bad_setting():
    with pytest.raises(ConfigError, match="stride"):
        LanguageModelSettings(max_length=8, stride=8)
    with pytest.raises(ConfigError, match="tasks.language_modeling.window"):
        settings_from(LanguageModelSettings, {"window": 3}, "tasks.language_modeling")
    with pytest.raises(ConfigError, match="speed_prompts"):
        LanguageModelSettings(speed_prompts=-1)
    with pytest.raises(ConfigError, match="speed_repeats"):
        LanguageModelSettings(speed_repeats=0)


def test_each_language_is_read_by_its_own_side(tmp_path, source_dir):
    foreign_dir = build_tiny_decoder_dir(tmp_path / "fr_side", seed=7)
    fr, en = tmp_path / "fr.txt", tmp_path / "en.txt"
    write_lines(fr, french_lines(6, seed=1))
    write_lines(en, ENGLISH[:4])
    settings = LanguageModelSettings(max_new_tokens=2, speed_prompts=5)
    scores, continuations, speed = evaluate_sides(source_dir, foreign_dir, {"fr": fr, "en": en},
                                                  {"fr": ["Le chat"]}, settings, variant="ramen", source_lang="en")
    by_lang = {row["lang"]: row for row in scores}
    assert by_lang["fr"]["bits_per_byte"] == pytest.approx(
        evaluate_language_model(foreign_dir, fr, settings)["bits_per_byte"])
    assert by_lang["en"]["bits_per_byte"] == pytest.approx(
        evaluate_language_model(source_dir, en, settings)["bits_per_byte"])
    assert [(row["lang"], row["prompt"]) for row in continuations] == [("fr", "Le chat")]
    assert write_bits_per_byte(tmp_path / "bpb.tsv", scores) == 2
    assert write_continuations(tmp_path / "gen.tsv", continuations) == 1
    # Speed: each language timed on its own side, on the first lines of its text (5 of 6 French, all 4 English).
    assert [(row["lang"], row["text"], row["prompts"], row["new_tokens"]) for row in speed] == [
        ("fr", "fr.txt", 5, 10), ("en", "en.txt", 4, 8)]
    assert all(row["variant"] == "ramen" and row["tokens_per_second"] > 0 for row in speed)
    assert write_speed(tmp_path / "speed.tsv", speed) == 2
    # A second held-out set of a language (another domain) gets its own row, read by the same side.
    other = tmp_path / "fr_other.txt"
    write_lines(other, ["Une phrase d'un autre domaine.", "Encore une."])
    scores, continuations, speed = evaluate_sides(source_dir, foreign_dir, {"fr": [fr, other]},
                                                  {"fr": ["Le chat"]}, settings, variant="ramen", source_lang="en")
    assert [row["text"] for row in scores] == ["fr.txt", "fr_other.txt"] and len(continuations) == 1
    assert [row["text"] for row in speed] == ["fr.txt"]  # timed once per language, on its first text
    # speed_source_language: false times the target language alone.
    _, _, speed = evaluate_sides(source_dir, foreign_dir, {"fr": fr, "en": en}, {},
                                 LanguageModelSettings(max_new_tokens=2, speed_prompts=2, speed_repeats=1,
                                                       speed_source_language=False),
                                 variant="ramen", source_lang="en")
    assert [(row["lang"], row["repeats"]) for row in speed] == [("fr", 1)]
    assert scores[1]["bits_per_byte"] == pytest.approx(
        evaluate_language_model(foreign_dir, other, settings)["bits_per_byte"])


def test_each_side_is_loaded_once_for_all_its_texts(tmp_path, source_dir):
    from ramen.tasks.language_modeling import load_causal_lm

    foreign_dir = build_tiny_decoder_dir(tmp_path / "fr_side", seed=7)
    texts = {}
    for name, lines in {"fr": french_lines(4, seed=1), "fr_other": ["Une autre phrase."], "en": ENGLISH[:3],
                        "en_other": ENGLISH[3:5]}.items():
        write_lines(tmp_path / f"{name}.txt", lines)
        texts.setdefault(name[:2], []).append(tmp_path / f"{name}.txt")
    loaded = []

    def counting_loader(directory):
        loaded.append(Path(directory))
        return load_causal_lm(directory)

    scores, _, _ = evaluate_sides(source_dir, foreign_dir, texts, {}, LanguageModelSettings(max_new_tokens=2),
                                  variant="ramen", source_lang="en", load_model=counting_loader)
    assert len(scores) == 4
    assert loaded == [Path(foreign_dir), Path(source_dir)]


def test_a_masked_lm_is_refused_by_name(tiny_source_dir):
    from ramen.tasks.language_modeling import load_causal_lm

    with pytest.raises(ConfigError, match="BertForMaskedLM, not a causal LM"):
        load_causal_lm(tiny_source_dir)


def test_the_context_token_is_chosen_by_string_and_changes_only_the_first_token(source_dir):
    tokenizer = AutoTokenizer.from_pretrained(source_dir)
    model = tiny_llama(len(tokenizer), seed=6)
    default = bits_per_byte(model, tokenizer, TEXTS)
    other = bits_per_byte(model, tokenizer, TEXTS, LanguageModelSettings(context_token="<|im_start|>"))
    assert other["tokens"] == default["tokens"] and other["bits"] != pytest.approx(default["bits"], rel=1e-6)
    named = bits_per_byte(model, tokenizer, TEXTS, LanguageModelSettings(context_token=tokenizer.bos_token))
    assert named["bits"] == pytest.approx(default["bits"], rel=1e-9)
    with pytest.raises(ConfigError, match="context_token"):
        bits_per_byte(model, tokenizer, TEXTS, LanguageModelSettings(context_token="<s>"))
