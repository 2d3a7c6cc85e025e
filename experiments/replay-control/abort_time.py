"""How soon a cancelled forward returns: one 64-token forward of the bundled 1.5B, cancelled 50 ms in.

Usage: python experiments/replay-control/abort_time.py ik|main. On ik_llama.cpp the runtime no longer stops a
forward (its abort races, see log.md), so there it runs whole; the 62 ms in log.md was taken before that."""

import sys
import threading
import time
from pathlib import Path

from codespec.decode.engine import CancelToken

if sys.argv[1] == "ik":
    from codespec.decode.runtimes.ik_llamacpp import IkLlamaCppRuntime as Runtime
else:
    from codespec.decode.runtimes.llamacpp import LlamaCppRuntime as Runtime

runtime = Runtime(Path.home() / ".cache/codespec/qwen2.5-coder-1.5b-gguf/model.gguf", threads=2, context=1024,
                  slots=1)
ids = list(range(1000, 1064))
runtime.forward(ids[:8], logits=1)  # warm-up
runtime.truncate(0)
started = time.perf_counter()
runtime.forward(ids, logits=1)
whole = time.perf_counter() - started
runtime.truncate(0)
token = CancelToken()
runtime.interrupt_with(token)
threading.Timer(0.05, token.cancel).start()
started = time.perf_counter()
try:
    runtime.forward(ids, logits=1)
    outcome = "ran whole"
except Exception as exc:  # ForwardInterrupted
    outcome = type(exc).__name__
stopped = time.perf_counter() - started
print(f"{sys.argv[1]}: 64-token forward {whole * 1000:.0f} ms; cancelled at 50 ms: {outcome} at "
      f"{stopped * 1000:.0f} ms; cached {len(runtime.cached)}")
