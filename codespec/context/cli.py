"""`codespec context` and `codespec complete`: show the context built, or a completion, at one file position.

`codespec context FILE:LINE:COL` and `codespec complete FILE:LINE:COL` (1-based, as compilers print
them; COL counts characters)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

from codespec.errors import CodespecError
from codespec.models.tokenizer import load_text_tokenizer

MAX_FILE_BYTES = 5_000_000


def parse_location(location: str) -> tuple[str, int, int]:
    parts = location.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise CodespecError(f"expected FILE:LINE:COL (1-based), got {location!r}")
    path, line, column = parts[0], int(parts[1]), int(parts[2])
    if line < 1 or column < 1:
        raise CodespecError(f"LINE and COL are 1-based, got {line}:{column}")
    return path, line, column


def read_source(path: str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The file's text, or a clear error for what no completion can be built from."""
    if not os.path.isfile(path):
        raise CodespecError(f"no such file: {path}")
    size = os.path.getsize(path)
    if size > max_bytes:
        raise CodespecError(
            f"{path} is too large for completion ({size / 1e6:.1f} MB > {max_bytes / 1e6:.0f} MB)"
        )
    with open(path, "rb") as handle:
        data = handle.read()
    if b"\x00" in data:
        raise CodespecError(f"{path} looks binary (it contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CodespecError(f"{path} is not UTF-8 text (byte {exc.start})") from None


def open_document(path: str, line: int, column: int, language: str | None):
    """The document and the 0-based position (utf-32: COL counts code points)."""
    from codespec.context.document import Document
    from codespec.context.languages import language_id_for_path

    text = read_source(path)
    doc = Document(
        "file://" + os.path.abspath(path), language or language_id_for_path(path), text, encoding="utf-32"
    )
    if line > doc.line_count:
        raise CodespecError(f"line {line} is past the end of {path} ({doc.line_count} lines)")
    length = len(doc.line_text(line - 1))
    if column > length + 1:
        raise CodespecError(f"column {column} is past the end of line {line} of {path} ({length} characters)")
    return doc, line - 1, column - 1


def default_model_spec() -> tuple[str, str | None, str]:
    try:
        from codespec.models import default_profile

        profile = default_profile()
        return profile.target, profile.draft, profile.drafting
    except ImportError:
        return "bundled:qwen2.5-coder-0.5b", None, "lookup"


def _other_documents(paths: list[str]) -> list:
    from codespec.context.document import Document
    from codespec.context.languages import language_id_for_path

    return [
        Document("file://" + os.path.abspath(p), language_id_for_path(p), read_source(p), encoding="utf-32")
        for p in paths
    ]


def _build(args: argparse.Namespace, tokenizer):
    from codespec.context.build import ContextConfig, build_context

    path, line, column = parse_location(args.location)
    doc, line0, char0 = open_document(path, line, column, args.language)
    config = ContextConfig(max_prompt_tokens=args.budget, max_block_lines=args.max_lines)
    if args.layout is not None:
        config = dataclasses.replace(config, layout=args.layout)
    if args.near_lines is not None:
        config = dataclasses.replace(config, near_suffix_lines=args.near_lines)
    ctx = build_context(
        doc, line0, char0, tokenizer=tokenizer, other_docs=_other_documents(args.other), config=config
    )
    return doc, ctx


def _print_context(ctx, as_json: bool) -> None:
    data = ctx.to_dict()
    if as_json:
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return
    print(f"mode: {ctx.mode} ({ctx.reason})")
    print(f"language: {ctx.language}")
    if ctx.mode == "none":
        return
    print(f"stop rule: {ctx.stop_rule}")
    print(
        f"prompt: {len(ctx.prompt_ids)} tokens ({ctx.family} template), window from line {ctx.window_start_line + 1}"
    )
    for snippet in ctx.neighbours:
        print(f"neighbour: {snippet.path}:{snippet.start_line + 1} (score {snippet.score:.2f})")
    for title, body in (
        ("header", ctx.header),
        ("prefix", ctx.prefix),
        ("suffix", ctx.suffix),
        *((("far suffix (before the prefix)", ctx.far_suffix),) if ctx.layout == "near-suffix" else ()),
        *((("near suffix (after the FIM suffix marker)", ctx.near_suffix),) if ctx.layout == "near-suffix" else ()),
        ("prompt", ctx.prompt),
    ):
        print(f"----- {title} -----")
        print(body)


def run_context(args: argparse.Namespace) -> int:
    model = args.model or default_model_spec()[0]
    _, ctx = _build(args, load_text_tokenizer(model))
    _print_context(ctx, args.json)
    return 0


def run_complete(args: argparse.Namespace) -> int:
    from codespec.context.parsecheck import parse_checked
    from codespec.context.postprocess import postprocess
    from codespec.engine_options import engine_from_args

    engine = engine_from_args(args, progress=not args.json)
    _, ctx = _build(args, engine.tokenizer)
    out: dict[str, Any] = {"text": "", "raw": "", "mode": ctx.mode, "reason": ctx.reason, "stats": {}}
    if ctx.mode != "none":
        result = engine.generate(
            ctx.prompt_ids, max_new_tokens=args.max_tokens, stop=ctx.stop, extra_streams=ctx.extra_streams
        )
        out.update(
            raw=result.text,
            text=result.text if args.raw else parse_checked(postprocess(result.text, ctx), ctx),
            finish_reason=result.finish_reason,
            stats=result.stats.to_dict(),
        )
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
    elif ctx.mode == "none":
        print(f"no completion here: {ctx.reason}", file=sys.stderr)
    else:
        print(out["text"])
    return 0


def register(subparsers: Any, name: str, help: str) -> None:  # noqa: A002 (the CLI table's signature)
    parser = subparsers.add_parser(name, help=help, description=help)
    parser.add_argument("location", metavar="FILE:LINE:COL", help="1-based line and column")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--language", help="language id (default: from the file extension)")
    parser.add_argument("--other", action="append", default=[], metavar="FILE", help="another open file")
    parser.add_argument("--budget", type=int, default=1536, help="prompt tokens for the current file")
    parser.add_argument("--max-lines", type=int, default=16, help="most lines of a block completion")
    parser.add_argument(
        "--layout", choices=["psm", "near-suffix", "anchored"],  # codespec.context.build.LAYOUTS, not imported
        help="FIM prompt layout (default: ContextConfig's, anchored: the file's block made at this cursor)",
    )
    parser.add_argument("--near-lines", type=int, help="near-suffix layout: lines after the cursor line")
    if name == "complete":
        from codespec.flags import add_model_arguments

        add_model_arguments(parser)
        parser.add_argument("--max-tokens", type=int, default=128)
        parser.add_argument("--raw", action="store_true", help="skip post-processing")
        parser.set_defaults(func=run_complete)
    else:
        parser.add_argument("--model", help="model spec (default: the device's default profile)")
        parser.set_defaults(func=run_context)
