"""ik_llama.cpp as the server configures it (several slot/context settings) beside mainline: cost of a forward over k tokens, one process, under the shared lock."""
import statistics
import time
from pathlib import Path

from codespec.decode.runtimes.ik_llamacpp import IkLlamaCppRuntime
from codespec.decode.runtimes.llamacpp import LlamaCppRuntime

g = Path.home() / ".cache/codespec/qwen2.5-coder-1.5b-gguf/model.gguf"
def measure(rt, ks=(1, 4, 8, 15, 16, 32, 64)):
    filler = [(17 + 31 * i) % 150000 + 1 for i in range(400)]
    rt.reset(); rt.forward(filler[:256], logits=1)
    out = {}
    for k in ks:
        ts = []
        for _ in range(3):
            t = time.perf_counter(); rt.forward(filler[256:256 + k], logits=k); ts.append(time.perf_counter() - t); rt.truncate(256)
        out[k] = round(statistics.median(ts) * 1000, 1)
    return out
for name, make in [("ik slots8 ctx4096", lambda: IkLlamaCppRuntime(g, threads=2)),
                   ("ik slots1 ctx4096", lambda: IkLlamaCppRuntime(g, threads=2, slots=1)),
                   ("ik slots1 ctx1024", lambda: IkLlamaCppRuntime(g, threads=2, slots=1, context=1024)),
                   ("mainline slots8", lambda: LlamaCppRuntime(g, threads=2))]:
    rt = make(); print(name, measure(rt), flush=True); rt.close(); del rt
