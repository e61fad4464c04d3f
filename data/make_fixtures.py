"""Writes data/fixtures/*.json, the worked examples of notebooks 02-03 (provenance in each file).

    python data/make_fixtures.py [OUT_DIR]      # default: data/fixtures beside this script

The committed fixtures are exactly what this script writes (tests/test_setup.py checks it).
"""

import json
import sys
from pathlib import Path

import numpy as np

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "fixtures"
OUT.mkdir(parents=True, exist_ok=True)


def dump(name, obj):
    (OUT / f"{name}.json").write_text(json.dumps(obj, indent=1) + "\n")


dump(
    "thinking_machines",
    {
        "provenance": "Jay Alammar, 'The Illustrated Transformer' (2018), the six steps of self-attention: "
        "the words 'Thinking Machines', d_k = 64, scores of the first query against both keys.",
        "tokens": ["Thinking", "Machines"],
        "d_k": 64,
        "q1_dot_k1": 112,
        "q1_dot_k2": 96,
    },
)
self_ex = {
    "provenance": "Worked self-attention example from a problem set, as given in the course issue: "
    "rows are tokens, columns are features; projections are X @ W.",
    "tokens": ["x1", "x2", "x3"],
    "X": [[1, -1, 0, 2], [0, -1, 2, 1], [-2, 2, -1, 0]],
    "W_Q": [[0, 1], [1, 0], [-0.5, 0], [1, 1]],
    "W_K": [[1, -0.5], [0, 1], [0.5, -0.5], [1, 0.5]],
    "W_V": [[1, 0.5], [-0.5, 0], [-1, 2], [0.5, -1]],
}
dump("self_attention_example", self_ex)
dump(
    "cross_attention_example",
    {
        "provenance": "Worked cross-attention example from a problem set, as given in the course issue: "
        "queries from X1 (2 tokens, 3 features), keys and values from X2 (4 tokens, 2 features).",
        "query_tokens": ["a1", "a2"],
        "key_tokens": ["b1", "b2", "b3", "b4"],
        "X1": [[-1, 1, 0], [0, 1, 0]],
        "W_Q": [[0, -1], [1, 1], [-1, 0]],
        "X2": [[-1, 1], [0, 1], [1, 1], [2, 0]],
        "W_K": [[1, 0], [-1, 1]],
        "W_V": [[-1, 0, 1, 2], [1, -1, 0, -2]],
    },
)

# The flawed hand solution: built from the right numbers with five deliberate mistakes.
X = np.array(self_ex["X"], float)
W_Q, W_K, W_V = (np.array(self_ex[k], float) for k in ("W_Q", "W_K", "W_V"))
Q = X @ W_Q
Q[1, 0] = -Q[1, 0]  # 1. a sign slipped in one query entry
W_K_copy = W_K.copy()
W_K_copy[2, 1] = -W_K_copy[2, 1]  # 2. W_K copied differently for the third key
K = np.stack([X[0] @ W_K, X[1] @ W_K, X[2] @ W_K_copy])
V = X @ W_V
scores = Q @ K.T  # 3. "/ sqrt(d_k)" written, then left out
e = np.exp(scores - scores.max(1, keepdims=True))
w = e / e.sum(1, keepdims=True)
weights = np.round(w)  # 4. rounded to 0 and 1 before use
outputs = weights @ V
answer = outputs.sum(0)  # 5. outputs of different queries added together
assert (weights.sum(1) == 1).all(), weights
dump(
    "flawed_hand_solution",
    {
        "provenance": "A hand solution of data/fixtures/self_attention_example.json written for the course with the "
        "mistakes students make (the right numbers with five typical slips applied; notebook 02 finds them).",
        "formula_written": "S = Q K^T / sqrt(d_k), A = softmax(S) row by row, Z = A V",
        "Q": Q.tolist(),
        "K": K.tolist(),
        "V": V.tolist(),
        "scores": scores.tolist(),
        "weights": weights.tolist(),
        "outputs": outputs.tolist(),
        "final_answer": answer.tolist(),
    },
)
print(f"wrote {len(list(OUT.glob('*.json')))} fixtures to {OUT}")
