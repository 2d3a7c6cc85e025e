"""Greedy equality on real code with the real bundled 0.5B: every drafting mode gives exactly the tokens
of transformers' own greedy `generate()`."""

import pytest
import torch

from codespec.benchmarks.generate import fim_ids
from codespec.decode.engine import Engine

pytestmark = pytest.mark.slow

PROMPTS = [
    # edit-style FIM: the body to write mirrors a sibling above
    ("fim", "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n    return a + b\n\n\ndef sub(a, b):\n    \"\"\"Return a - b.\"\"\"\n",
     "\n\nprint(add(1, 2), sub(3, 1))\n"),
    ("fim", "import os\n\n\ndef list_python_files(root):\n    result = []\n    for dirpath, _, names in os.walk(root):\n",
     "\n    return result\n"),
    ("plain", "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n", ""),
]


def prompt_ids(tokenizer, kind, prefix, suffix):
    if kind == "fim":
        return fim_ids(tokenizer, prefix, suffix)
    return tokenizer.encode(prefix, add_special_tokens=False)


@torch.inference_mode()
def hf_greedy(loaded, ids, max_new):
    out = loaded.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                max_new_tokens=max_new, do_sample=False, temperature=None, top_p=None, top_k=None,
                                eos_token_id=loaded.stop_ids, pad_token_id=loaded.stop_ids[0])
    tokens = out[0, len(ids):].tolist()
    return tokens[: next((i for i, t in enumerate(tokens) if t in loaded.stop_ids), len(tokens))]


def test_real_model_every_mode_matches_transformers_greedy(bundled_05b):
    # The 0.5B drafting for itself still exercises the draft-model path on real weights.
    engine = Engine(bundled_05b, bundled_05b, drafting="lookup", stop_token_ids=bundled_05b.stop_ids)
    total_accepted = 0
    for kind, prefix, suffix in PROMPTS:
        ids = prompt_ids(bundled_05b.tokenizer, kind, prefix, suffix)
        expected = hf_greedy(bundled_05b, ids, 24)
        assert expected, "the model produced nothing to compare"
        for mode in ("none", "lookup", "both"):
            result = engine.generate(ids, max_new_tokens=24, drafting=mode)
            assert result.token_ids == expected, (mode, bundled_05b.tokenizer.decode(result.token_ids))
            total_accepted += result.stats.accepted
    assert total_accepted > 0
