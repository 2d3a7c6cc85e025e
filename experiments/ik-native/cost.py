"""ik_llama.cpp's cost of a forward over k tokens after 256 cached, as the server configures it, for whichever
libllama IK_LLAMA_CPP_LIB_PATH names (unset: the installed one). Fastest of 7 (contention only adds time), one process per build.
Run under the shared lock: experiments/ik-native/run_cost.sh"""

import json
import os
import sys
import time
from pathlib import Path

from codespec.decode.runtimes.ik_llamacpp import IkLlamaCppRuntime

GGUF = Path.home() / ".cache/codespec/qwen2.5-coder-1.5b-gguf/model.gguf"
KS = (1, 2, 4, 8, 16, 64, 256)


def main() -> None:
    runtime = IkLlamaCppRuntime(GGUF, threads=2)
    from codespec.decode.runtimes.ik_llamacpp import kernel_features

    lib = os.environ.get("IK_LLAMA_CPP_LIB_PATH") or "installed"
    filler = [(17 + 31 * i) % 150000 + 1 for i in range(600)]
    runtime.reset()
    runtime.forward(filler[:256], logits=1)
    out = {}
    for k in KS:
        times = []
        for _ in range(7):
            started = time.perf_counter()
            runtime.forward(filler[256 : 256 + k], logits=k)
            times.append(time.perf_counter() - started)
            runtime.truncate(256)
        out[k] = round(min(times) * 1000, 1)
    ratio8 = round(out[8] / out[1], 2)
    print(json.dumps({"lib": lib, "kernels": kernel_features(), "ms": out, "k8_over_k1": ratio8}), flush=True)
    runtime.close()


if __name__ == "__main__":
    sys.exit(main())
