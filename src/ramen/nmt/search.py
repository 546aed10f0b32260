"""Batched beam search with a length penalty, as in fairseq.

A finished hypothesis scores sum(log p) / length**length_penalty, its length
counting the end-of-sentence token. A sentence stops once ``beam`` hypotheses
have finished; at the length limit the open beams are closed with an end token.
Decoding is incremental: each step runs the decoder on one new position per beam,
with earlier self-attention keys/values and the projected encoder and BERT states
cached (fairseq's incremental state).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ramen.nmt.model import TransformerNmt


@dataclass(frozen=True)
class SearchSettings:
    beam: int = 5
    length_penalty: float = 1.0
    # The longest output: max_len_a * source length + max_len_b tokens.
    max_len_a: float = 1.2
    max_len_b: int = 10


@torch.no_grad()
def beam_search(model: TransformerNmt, source_ids: torch.Tensor, bos_id: int, eos_id: int,
                settings: SearchSettings, bert_states=None, bert_padding=None) -> list[list[int]]:
    """The best hypothesis (token ids without BOS/EOS) for each source row."""
    model.eval()
    batch, beam = source_ids.shape[0], settings.beam
    memory, memory_padding = model.encode(source_ids, bert_states, bert_padding)
    source_lengths = (~memory_padding).sum(1)
    max_steps = (settings.max_len_a * source_lengths.float() + settings.max_len_b).long().clamp(min=1)

    def expand(tensor):
        return None if tensor is None else tensor.repeat_interleave(beam, dim=0)

    memory_padding, bert_padding = expand(memory_padding), expand(bert_padding)
    cache = model.start_cache(expand(memory), expand(bert_states))
    tokens = torch.full((batch * beam, 1), bos_id, dtype=torch.long, device=source_ids.device)
    scores = torch.full((batch, beam), float("-inf"), device=source_ids.device)
    scores[:, 0] = 0.0  # every beam starts identical: let only the first one expand
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    done = [False] * batch

    for step in range(int(max_steps.max())):
        logits = model.decode_step(tokens[:, -1:], step, cache, memory_padding, bert_padding)
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        vocab = log_probs.shape[-1]
        candidates = (scores.unsqueeze(-1) + log_probs.view(batch, beam, vocab)).view(batch, -1)
        top_scores, top_index = candidates.topk(2 * beam, dim=1)
        top_scores, top_index = top_scores.tolist(), top_index.tolist()
        next_rows, next_tokens, next_scores = [], [], []
        for b in range(batch):
            kept = []
            last_step = step + 1 >= int(max_steps[b])
            if not done[b]:
                for score, index in zip(top_scores[b], top_index[b]):
                    if score == float("-inf"):
                        break
                    row, token = b * beam + index // vocab, index % vocab
                    if token == eos_id or last_step:
                        hypothesis = tokens[row, 1:].tolist() + ([] if token == eos_id else [token])
                        finished[b].append((score / (step + 1) ** settings.length_penalty, hypothesis))
                        if len(finished[b]) >= beam:
                            break
                    else:
                        kept.append((row, token, score))
                        if len(kept) == beam:
                            break
                done[b] = len(finished[b]) >= beam or last_step or not kept
            if done[b]:
                kept = []
            # finished sentences keep dummy beams (score -inf) so the batch shape stays fixed
            while len(kept) < beam:
                kept.append((b * beam, eos_id, float("-inf")))
            for row, token, score in kept:
                next_rows.append(row)
                next_tokens.append(token)
                next_scores.append(score)
        if all(done):
            break
        rows = torch.tensor(next_rows, device=tokens.device)
        tokens = torch.cat([tokens[rows], torch.tensor(next_tokens, device=tokens.device).unsqueeze(1)], dim=1)
        # a beam's new row always comes from a row of the same sentence: only self-attention states move
        for layer_cache in cache:
            keys, values = layer_cache["self"]
            layer_cache["self"] = (keys[rows], values[rows])
        scores = torch.tensor(next_scores, device=scores.device).view(batch, beam)
    return [max(hyps, key=lambda item: item[0])[1] if hyps else [] for hyps in finished]
