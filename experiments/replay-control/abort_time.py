"""How soon a cancelled forward returns: one 64-token forward of the bundled 1.5B, cancelled 50 ms in.
Usage: python experiments/replay-control/abort_time.py ik|main (ik: no stop since it races, see log.md)."""
import threading, time, sys
from pathlib import Path
from codespec.decode.engine import CancelToken
mod = sys.argv[1]
if mod == "ik":
    from codespec.decode.runtimes.ik_llamacpp import IkLlamaCppRuntime as R
else:
    from codespec.decode.runtimes.llamacpp import LlamaCppRuntime as R
r = R(Path.home() / ".cache/codespec/qwen2.5-coder-1.5b-gguf/model.gguf", threads=2, context=1024, slots=1)
ids = list(range(1000, 1064))
r.forward(ids[:8], logits=1); r.truncate(0)
t0 = time.perf_counter(); r.forward(ids, logits=1); full = time.perf_counter() - t0
r.truncate(0)
tok = CancelToken(); r.interrupt_with(tok)
threading.Timer(0.05, tok.cancel).start()
t0 = time.perf_counter()
try:
    r.forward(ids, logits=1); print("not interrupted")
except Exception as e:
    print(type(e).__name__)
stopped = time.perf_counter() - t0
print(f"{mod}: 64-token forward {full*1000:.0f} ms; cancelled at 50 ms, returned at {stopped*1000:.0f} ms; cached {len(r.cached)}")
