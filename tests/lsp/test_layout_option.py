"""The promptLayout / nearSuffixLines server options reach the context room's ContextConfig."""

from __future__ import annotations

from lsp.completion import CompletionManager
from lsp.options import ServerOptions
from lsp.stats import ServerStats


def _config(options: ServerOptions):
    manager = CompletionManager(
        options=lambda: options, get_engine=lambda: None, notify=lambda *_: None, stats=ServerStats()
    )
    try:
        return manager._context_config()
    finally:
        manager.executor.shutdown(wait=False)


def test_layout_options_are_validated_and_applied() -> None:
    options = ServerOptions().updated({"promptLayout": "psm", "nearSuffixLines": 2, "maxLines": 3})
    assert (options.prompt_layout, options.near_suffix_lines) == ("psm", 2)
    config = _config(options)
    assert (config.layout, config.near_suffix_lines, config.max_block_lines) == ("psm", 2, 3)


def test_bad_layout_options_are_ignored_and_defaults_kept() -> None:
    from codespec.context import ContextConfig

    options = ServerOptions().updated({"promptLayout": "spm", "nearSuffixLines": -1})
    assert options.prompt_layout is None and options.near_suffix_lines is None
    config = _config(options)
    assert (config.layout, config.near_suffix_lines) == (ContextConfig().layout, ContextConfig().near_suffix_lines)


def test_serve_flags_set_the_layout_and_refuse_a_bad_value() -> None:
    import argparse

    import pytest

    from codespec.errors import CodespecError
    from lsp.cli import options_from_args, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(), "serve", "serve")
    args = parser.parse_args(["serve", "--prompt-layout", "psm", "--near-suffix-lines", "1", "--runtime", "torch"])
    options = options_from_args(args)
    assert (options.prompt_layout, options.near_suffix_lines, options.runtime) == ("psm", 1, "torch")
    with pytest.raises(CodespecError, match="--near-suffix-lines 99"):
        options_from_args(parser.parse_args(["serve", "--near-suffix-lines", "99"]))
