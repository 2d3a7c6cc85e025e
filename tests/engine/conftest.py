from dataclasses import dataclass

import pytest
import torch

from codespec.tiny import tiny_model, tiny_tokenizer

torch.set_num_threads(1)


@dataclass
class Bundle:
    model: torch.nn.Module
    tokenizer: object


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="session")
def target(tokenizer):
    return Bundle(tiny_model(0), tokenizer)


@pytest.fixture(scope="session")
def draft(tokenizer):
    return Bundle(tiny_model(1, layers=1), tokenizer)


@torch.inference_mode()
def reference_greedy(model, prompt: list[int], max_new_tokens: int, stop_ids: set[int]) -> list[int]:
    """Plain greedy by full recomputation: no cache, no drafts, nothing shared with the engine."""
    ids = list(prompt)
    out: list[int] = []
    for _ in range(max_new_tokens):
        token = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        if token in stop_ids:
            break
        out.append(token)
        ids.append(token)
    return out
