"""ik_llama.cpp's stop under load: N forwards of the bundled 1.5B (2 threads), each cancelled at a random moment
in its first 50 ms through the runtime's abort callback (forced on, patched build or not). The stock library
hangs (a compute thread leaves the graph, the other waits at a barrier); with build-support/ik-abort-at-node.patch
every forward returns. Usage: .venv/bin/python experiments/replay-control/abort_stress.py 3000 [under a timeout];
the unpatched library: build it (reverse the patch, `ninja -C build/ik-llama/cmake ggml`) and LD_PRELOAD it."""

import ctypes
import random
import sys
import threading
import time
from pathlib import Path

from codespec.decode.api import CancelToken
from codespec.decode.runtimes import ForwardInterrupted
from codespec.decode.runtimes.ik_llamacpp import IkLlamaCppRuntime, library_stops_forwards
from codespec.decode.runtimes.llamacpp import _strlen, abort_setter

GGUF = Path.home() / ".cache/codespec/qwen2.5-coder-1.5b-gguf/model.gguf"


def main(n: int) -> None:
    print("patched:", library_stops_forwards(), flush=True)
    runtime = IkLlamaCppRuntime(GGUF, threads=2)
    set_abort = abort_setter(runtime._lib._lib)  # forced on: the runtime would not stop an unpatched build
    ids = [(17 + 31 * i) % 150000 + 1 for i in range(600)]
    runtime.forward(ids[:64], logits=1)
    rng = random.Random(0)
    stopped = whole = 0
    started = time.time()
    for i in range(n):
        token = CancelToken()
        set_abort(runtime._ctx, _strlen(), ctypes.addressof(token.flag))
        runtime._interrupt = token
        k = rng.choice([1, 2, 4, 8])
        threading.Timer(rng.uniform(0, 0.05), token.cancel).start()
        try:
            runtime.forward(ids[64 : 64 + k], logits=k)
            runtime.truncate(64)
            whole += 1
        except ForwardInterrupted:
            stopped += 1
        if i % 100 == 0:
            print(i, "stopped", stopped, "whole", whole, f"{time.time() - started:.1f} s", flush=True)
    print("all returned:", stopped, "stopped,", whole, "whole", f"{time.time() - started:.1f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
