"""`codespec generate`: runs one prompt through the speculative decoder and prints what it generates.

Its parser is added in codespec/cli.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from codespec.engine_options import engine_from_args
from codespec.errors import CodespecError
from codespec.flags import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt-file", required=True, help="file with the prompt text ('-' for stdin)")
    parser.add_argument("--max-tokens", type=int, default=128)
    add_model_arguments(parser)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def read_prompt(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CodespecError(f"prompt file not found: {path}") from None
    except UnicodeDecodeError:
        raise CodespecError(f"prompt file is not UTF-8 text: {path}") from None


def run(args: argparse.Namespace) -> int:
    prompt = read_prompt(args.prompt_file)
    if not prompt:
        raise CodespecError("empty prompt")
    if args.max_tokens < 1:
        raise CodespecError("--max-tokens must be >= 1")
    engine = engine_from_args(args, progress=not args.json)
    prompt_ids = engine.tokenizer.encode(prompt, add_special_tokens=False)
    kwargs = dict(max_new_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    if args.json:
        result = engine.generate(prompt_ids, **kwargs)
        print(json.dumps({"text": result.text, "token_ids": result.token_ids,
                          "finish_reason": result.finish_reason, "drafting": engine.drafting,
                          "stats": result.stats.to_dict()}))
        return 0
    for event in engine.stream(prompt_ids, **kwargs):
        sys.stdout.write(event.text)
        sys.stdout.flush()
        if event.done:
            s = event.result.stats
            print(f"\n--- {s.new_tokens} tokens, {s.target_forwards} target forwards, tau {s.tokens_per_forward:.2f}, "
                  f"acceptance {s.acceptance_rate:.0%}, {s.tokens_per_s:.1f} tok/s, prefill {s.prefill_s:.2f}s "
                  f"({event.result.finish_reason})", file=sys.stderr)
    return 0
