"""Greedy continuations of prompts by llama.cpp (llama-cpp-python) from GGUF files: run by
tools/check_gguf.py in the llama.cpp virtualenv, which has neither torch nor ramen.

Usage: python gguf_llamacpp_generate.py job.json answer.json
job: {"models": [paths], "prompts": [texts], "new_tokens": N}; answer, per model and prompt: the
prompt's token ids, the generated ids and the prompt's last-position logits."""

from __future__ import annotations

import json
import sys

import numpy as np
from llama_cpp import Llama


def greedy(llm: Llama, prompt: str, new_tokens: int) -> dict:
    # add_bos follows the file's tokenizer.ggml.add_bos_token; special: chat markers stay whole.
    ids = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
    llm.reset()
    llm.eval(ids)
    first = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    generated = []
    for _ in range(new_tokens):
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        generated.append(token)
        llm.eval([token])
    return {"prompt_ids": ids, "generated": generated, "first_logits": first.tolist()}


def main(job_path: str, answer_path: str) -> None:
    with open(job_path, encoding="utf-8") as handle:
        job = json.load(handle)
    answer = {}
    for path in job["models"]:
        llm = Llama(model_path=path, n_ctx=256, n_threads=1, logits_all=True, verbose=False)
        answer[path] = [greedy(llm, prompt, job["new_tokens"]) for prompt in job["prompts"]]
        del llm
    with open(answer_path, "w", encoding="utf-8") as handle:
        json.dump(answer, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
