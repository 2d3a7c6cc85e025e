"""`codespec serve`: run the language server over stdio (what editors launch) or TCP."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys

from codespec.errors import CodespecError
from codespec.flags import add_model_arguments
from lsp.options import PROMPT_LAYOUTS

LOOPBACK_NAMES = {"localhost"}


def register(subparsers: argparse._SubParsersAction, name: str, help: str) -> None:  # noqa: A002
    parser = subparsers.add_parser(name, help=help, description=help)
    transport = parser.add_mutually_exclusive_group()
    transport.add_argument("--stdio", action="store_true", help="speak LSP on stdin/stdout (default)")
    transport.add_argument("--tcp", action="store_true", help="listen for one LSP client on TCP")
    parser.add_argument("--host", default="127.0.0.1", help="TCP address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=2087, help="TCP port (default 2087)")
    parser.add_argument(
        "--allow-remote", action="store_true", help="allow a --host that is not a loopback address"
    )
    add_model_arguments(parser, unset_defaults=True)
    parser.add_argument("--engine", metavar="URL",
                        help="generate on a serving engine (llama-server, vLLM, SGLang: OpenAI /v1/completions) "
                             "instead of local models; --model then names only the tokenizer and FIM template")
    parser.add_argument("--engine-model", metavar="NAME", help="the model name the engine serves (default: its only one)")
    parser.add_argument("--prompt-layout", choices=PROMPT_LAYOUTS,
                        help="FIM prompt layout (anchored: the file's pinned block first, a jump re-prefills only the "
                             "cursor window; near-suffix: typing re-prefills only the changed tokens)")
    parser.add_argument("--near-suffix-lines", type=int, help="near-suffix layout: lines after the cursor line")
    parser.add_argument("--load", choices=["eager", "lazy"], help="load models at start or on first request")
    parser.add_argument("--max-tokens", type=int, help="max new tokens per suggestion")
    parser.add_argument("--streaming", action="store_true", default=None, help="send codespec/partialCompletion")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default=None)
    # Hidden test knob: simulated per-decode-step delay of the engine (seconds).
    parser.add_argument("--record", metavar="FILE", help="append every client message to FILE (codespec-session v1)")
    parser.add_argument("--step-delay", type=float, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def options_from_args(args: argparse.Namespace):
    from lsp.options import ServerOptions, coerce

    flags = {  # option key -> (flag, value)
        "model": ("--model", args.model),
        "draftModel": ("--draft-model", args.draft_model),
        "drafting": ("--drafting", args.drafting),
        "device": ("--device", args.device),
        "runtime": ("--runtime", args.runtime),
        "dtype": ("--dtype", args.dtype),
        "threads": ("--threads", args.threads),
        "engine": ("--engine", args.engine),
        "engineModel": ("--engine-model", args.engine_model),
        "promptLayout": ("--prompt-layout", args.prompt_layout),
        "nearSuffixLines": ("--near-suffix-lines", args.near_suffix_lines),
        "loadModels": ("--load", args.load),
        "maxTokens": ("--max-tokens", args.max_tokens),
        "streaming": ("--streaming", args.streaming),
        "logLevel": ("--log-level", args.log_level),
        "stepDelay": ("--step-delay", args.step_delay),
    }
    given = {}
    for key, (flag, value) in flags.items():
        if value is None:
            continue
        try:
            coerce(ServerOptions.KEYS[key], value)  # the command line must not silently drop a bad value
        except (TypeError, ValueError) as exc:
            raise CodespecError(f"{flag} {value}: {exc}") from None
        given[key] = value
    return ServerOptions().updated(given)


def check_host(host: str, allow_remote: bool) -> None:
    if allow_remote or host in LOOPBACK_NAMES:
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise CodespecError(f"--host {host} is not a loopback address; pass --allow-remote to listen on it")


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    if args.tcp:
        check_host(args.host, args.allow_remote)
    protocol_out = _reserve_stdout() if not args.tcp else None
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="codespec %(levelname)s %(name)s: %(message)s"
    )
    from lsp.server import create_server, set_log_level

    set_log_level(options.log_level)
    server = create_server(options)
    if args.record:
        from codespec.sessions.record import SessionRecorder

        server.protocol.recorder = SessionRecorder(args.record, source="codespec serve --record")
    code = 1
    try:
        if args.tcp:
            server.start_tcp(args.host, args.port)
        else:
            from lsp.stdio import serve_stdio

            serve_stdio(server, sys.stdin.buffer, protocol_out)
        code = 0 if server.protocol.shutdown_requested or server.terminated else 1
    except (KeyboardInterrupt, SystemExit):
        code = 0 if server.protocol.shutdown_requested else 1
    except Exception:  # a failure of the read loop itself: say so and exit, never wait on threads
        logging.getLogger("lsp").exception("the server's read loop failed; exiting")
        code = 1
    finally:
        server.shutdown()
        if server.protocol.recorder is not None:
            server.protocol.recorder.close()
        for stream in (protocol_out, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
    # Worker threads (a generation, the blocked stdin reader) must not hold the process open.
    os._exit(code)


def _reserve_stdout():
    """Keep the real stdout for protocol frames only; anything else printing to fd 1 (a library,
    a stray print) lands on stderr instead."""
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(protocol_fd, "wb", buffering=0)
