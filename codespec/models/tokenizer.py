"""A model spec's tokenizer alone, without torch or transformers: what the thin client (`serve --engine`) loads.

The bundled models' tokenizer ships inside the package (codespec/data, gzipped: 2 MB), because the thin
client installs no model weights; it is the tokenizer of the bundled GGUFs (both sizes share it, and
tests/test_thin_client.py checks it against the one converted from the GGUF)."""

from __future__ import annotations

import gzip
from importlib import resources

from codespec import fim
from codespec.errors import CodespecError
from codespec.models.spec import parse_spec
from codespec.tokenizer import TextTokenizer

PACKAGED_TOKENIZER = "qwen2.5-coder-tokenizer.json.gz"
PACKAGED_TOKENIZER_CONFIG = "qwen2.5-coder-tokenizer_config.json"


def load_text_tokenizer(spec: str) -> TextTokenizer:
    """The tokenizer of `spec`: the prompt is built here, the model runs elsewhere."""
    from tokenizers import Tokenizer

    parsed = parse_spec(spec)
    if parsed.kind == "tiny":
        from codespec.tiny import tiny_tokenizer_object

        return TextTokenizer(tiny_tokenizer_object(), eos_token=fim.ENDOFTEXT)
    if parsed.kind == "bundled":
        return packaged_tokenizer()
    if parsed.kind == "hf_dir":
        assert parsed.path is not None
        return TextTokenizer.from_dir(parsed.path)
    if parsed.kind == "gguf":
        assert parsed.path is not None
        try:  # the tokenizer inside a user's GGUF is converted by transformers, once, into the cache
            from codespec.models.convert import ensure_gguf_tokenizer

            return TextTokenizer.from_dir(ensure_gguf_tokenizer(parsed.path))
        except ImportError as exc:
            raise CodespecError(f"reading the tokenizer of {parsed.path} needs the model extras "
                                f"(pip install 'codespec[local]'); or name a tokenizer directory or hub id") from exc
    try:
        return TextTokenizer(Tokenizer.from_pretrained(parsed.name))
    except Exception as exc:  # noqa: BLE001 - offline, no such repository: one clear line
        raise CodespecError(f"cannot load the tokenizer of {parsed.name!r}: {exc}") from exc


def packaged_tokenizer() -> TextTokenizer:
    import json

    from tokenizers import Tokenizer

    data = resources.files("codespec") / "data"
    text = gzip.decompress((data / PACKAGED_TOKENIZER).read_bytes()).decode()
    config = json.loads((data / PACKAGED_TOKENIZER_CONFIG).read_text())
    return TextTokenizer(Tokenizer.from_str(text), eos_token=config.get("eos_token"),
                         unk_token=config.get("unk_token"))
