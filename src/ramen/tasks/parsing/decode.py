"""Maximum spanning tree decoding (Chu-Liu-Edmonds) with exactly one child of the root.

Scores are a square matrix ``scores[dependent, head]`` over ``n + 1`` nodes,
node 0 being the artificial root. The result ``heads`` has ``heads[0] = -1``
and, for every word ``d >= 1``, its head in ``0..n``; the arcs always form a
tree (connected, acyclic, one root child), possibly non-projective, as UD is.
"""

from __future__ import annotations

import numpy as np


def _find_cycle(heads: np.ndarray) -> list[int] | None:
    """A cycle among ``heads`` (node 0 excluded), as a list of nodes, or None."""
    n = len(heads)
    state = np.zeros(n, dtype=np.int8)  # 0 unseen, 1 on the current path, 2 done
    state[0] = 2
    for start in range(1, n):
        path = []
        node = start
        while state[node] == 0:
            state[node] = 1
            path.append(node)
            node = heads[node]
        if state[node] == 1:  # walked back into the current path
            return path[path.index(node):]
        for visited in path:
            state[visited] = 2
    return None


def _chu_liu_edmonds(scores: np.ndarray) -> np.ndarray:
    """Highest-scoring arborescence rooted at node 0 (any number of root children)."""
    n = scores.shape[0]
    scores = scores.copy()
    np.fill_diagonal(scores, -np.inf)
    scores[0, :] = -np.inf
    heads = scores.argmax(axis=1)
    heads[0] = -1
    cycle = _find_cycle(heads)
    if cycle is None:
        return heads

    in_cycle = np.zeros(n, dtype=bool)
    in_cycle[cycle] = True
    outside = np.flatnonzero(~in_cycle)  # node 0 is always outside
    cycle = np.array(cycle)
    m = len(outside)  # contracted graph: outside nodes keep order, the cycle becomes node m
    cycle_gain = scores[cycle, heads[cycle]]

    contracted = np.full((m + 1, m + 1), -np.inf)
    contracted[:m, :m] = scores[np.ix_(outside, outside)]
    # Arc head -> cycle: enter at the node whose cycle arc it replaces best.
    entering = scores[np.ix_(cycle, outside)] - cycle_gain[:, None]  # (|C|, m)
    enter_at = entering.argmax(axis=0)
    contracted[m, :m] = entering[enter_at, np.arange(m)]
    # Arc cycle -> dependent: leave from the cycle node that scores it highest.
    leaving = scores[np.ix_(outside, cycle)]  # (m, |C|)
    leave_from = leaving.argmax(axis=1)
    contracted[:m, m] = leaving[np.arange(m), leave_from]

    sub_heads = _chu_liu_edmonds(contracted)

    result = heads.copy()
    for index, node in enumerate(outside[1:], start=1):
        head = sub_heads[index]
        result[node] = cycle[leave_from[index]] if head == m else outside[head]
    entry_head = sub_heads[m]
    entered = cycle[enter_at[entry_head]]
    result[entered] = outside[entry_head]
    return result


def tree_score(scores: np.ndarray, heads: np.ndarray) -> float:
    return float(scores[np.arange(1, len(heads)), heads[1:]].sum())


def decode_mst(scores: np.ndarray) -> np.ndarray:
    """The highest-scoring dependency tree with a single root child (see the module doc)."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] != scores.shape[1] or scores.shape[0] < 2:
        raise ValueError(f"scores must be square over root + at least one word, got {scores.shape}")
    heads = _chu_liu_edmonds(scores)
    root_children = np.flatnonzero(heads[1:] == 0) + 1
    if len(root_children) == 1:
        return heads
    # UD trees have one root word: try each candidate as the only root child, keep the best.
    best, best_score = None, -np.inf
    for child in root_children:
        constrained = scores.copy()
        constrained[1:, 0] = -np.inf
        constrained[child, 0] = scores[child, 0]
        candidate = _chu_liu_edmonds(constrained)
        score = tree_score(scores, candidate)
        if score > best_score:
            best, best_score = candidate, score
    return best


def is_tree(heads) -> bool:
    """True if ``heads`` (``heads[0]`` ignored) is a tree rooted at 0 with one root child."""
    heads = np.asarray(heads)
    n = len(heads)
    words = heads[1:]
    if n < 2 or np.any(words < 0) or np.any(words >= n) or np.any(words == np.arange(1, n)):
        return False
    if int((words == 0).sum()) != 1:
        return False
    fixed = heads.copy()
    fixed[0] = 0
    return _find_cycle(fixed) is None
