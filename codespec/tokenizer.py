"""A tokenizer for the thin client: the `tokenizers` library behind the few calls the prompt code makes.

`codespec serve --engine URL` builds the prompt here and generates elsewhere, so it needs a tokenizer but not
transformers (which pulls in torch). `TextTokenizer` answers the calls that context/, lsp/ and the remote
backend make of a transformers fast tokenizer (`tokenizer(text, add_special_tokens=False,
split_special_tokens=True)`, `encode`, `decode`, `get_vocab`, `convert_tokens_to_ids`, `eos_token_id`, ...)
with the same ids: a fast tokenizer is this same `tokenizers` object underneath."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer


class TextTokenizer:
    def __init__(self, tokenizer: Tokenizer, *, eos_token: str | None = None, unk_token: str | None = None) -> None:
        self._plain = tokenizer
        # split_special_tokens=True: special tokens' text in a document is text, not a marker. `tokenizers` holds
        # that as a flag on the object, so a second object keeps calls from different threads independent.
        self._split = Tokenizer.from_str(tokenizer.to_str())
        self._split.encode_special_tokens = True
        self.eos_token = eos_token
        self.unk_token = unk_token
        self.eos_token_id = tokenizer.token_to_id(eos_token) if eos_token else None
        self.unk_token_id = tokenizer.token_to_id(unk_token) if unk_token else None

    @classmethod
    def from_dir(cls, directory: Path) -> TextTokenizer:
        """A saved transformers tokenizer directory (tokenizer.json, and tokenizer_config.json for EOS / UNK)."""
        config: dict[str, Any] = {}
        try:
            config = json.loads((directory / "tokenizer_config.json").read_text())
        except (OSError, ValueError):
            pass
        return cls(Tokenizer.from_file(str(directory / "tokenizer.json")),
                   eos_token=_token_text(config.get("eos_token")), unk_token=_token_text(config.get("unk_token")))

    def __call__(self, text: str, *, add_special_tokens: bool = False,
                 split_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens=add_special_tokens,
                                         split_special_tokens=split_special_tokens)}

    def encode(self, text: str, *, add_special_tokens: bool = False, split_special_tokens: bool = False) -> list[int]:
        which = self._split if split_special_tokens else self._plain
        return which.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool = False) -> str:
        # Qwen's tokenizers do not clean up spaces; the flag is accepted for the transformers signature.
        return self._plain.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def get_vocab(self) -> dict[str, int]:
        return self._plain.get_vocab(with_added_tokens=True)

    def convert_tokens_to_ids(self, token: str) -> int | None:
        found = self._plain.token_to_id(token)
        return found if found is not None else self.unk_token_id

    def __len__(self) -> int:
        return self._plain.get_vocab_size(with_added_tokens=True)


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # an AddedToken as saved: {"content": ..., ...}
        value = value.get("content")
    return value if isinstance(value, str) else None
