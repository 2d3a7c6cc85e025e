"""Time an ik_llama.cpp forward over k new tokens (after 256 cached ones) per GGUF; run with /work/ikvenv's Python.

Standalone (ik-llama-cpp-python lives in its own venv, never the project's): the same filler tokens, context,
k values and interleaved rounds as cost_curves.py, through ik_llama_cpp's own ctypes bindings."""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from pathlib import Path

from ik_llama_cpp import _ctypes_api as C
from ik_llama_cpp._internals import IkContext, IkModel

KS = (*range(1, 17), 64)
CONTEXT = 256


def decode(ctx: IkContext, tokens: list[int], start: int, all_logits: bool) -> None:
    batch = C.llama_batch_init(len(tokens), 0, 1)
    batch.n_tokens = len(tokens)
    for i, token in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + i, 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1 if all_logits or i == len(tokens) - 1 else 0
    try:
        if ctx.decode(batch) != 0:
            raise RuntimeError("llama_decode failed")
    finally:
        C.llama_batch_free(batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("ggufs", nargs="+", metavar="NAME=PATH")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--flash-attn", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    seq_rm = C._lib.llama_kv_cache_seq_rm  # not wrapped by the package: bound here
    seq_rm.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]
    seq_rm.restype = ctypes.c_bool
    contexts = {}
    for item in args.ggufs:
        name, _, path = item.partition("=")
        model = IkModel(path, use_mmap=True, use_mlock=False, n_gpu_layers=0)
        if name.endswith("+rtr"):  # ik_llama.cpp's run-time repack into its row-interleaved types (-rtr)
            params = C.llama_model_default_params()
            params.use_mmap, params.repack_tensors, params.n_gpu_layers = False, True, 0
            C.llama_free_model(model.model)
            model._model = C.llama_model_load_from_file(path.encode(), params)
            if not model._model:
                raise RuntimeError(f"cannot load {path} with run-time repacking")
        contexts[name] = IkContext(model, n_ctx=1024, n_threads=args.threads, flash_attn=args.flash_attn)
    filler = [(17 + 31 * i) % 150000 + 1 for i in range(CONTEXT + max(KS))]
    for ctx in contexts.values():
        decode(ctx, filler[:CONTEXT], 0, all_logits=False)
    runs: dict[str, dict[int, list[float]]] = {name: {k: [] for k in KS} for name in contexts}
    for _ in range(args.rounds):
        for name, ctx in contexts.items():
            for k in KS:
                started = time.perf_counter()
                decode(ctx, filler[CONTEXT : CONTEXT + k], CONTEXT, all_logits=True)
                runs[name][k].append(time.perf_counter() - started)
                seq_rm(ctx.ctx, 0, CONTEXT, -1)
    result = {name: {str(k): statistics.median(v) * 1000 for k, v in per_k.items()} for name, per_k in runs.items()}
    info = C._lib.llama_print_system_info
    info.restype = ctypes.c_char_p
    args.out.write_text(json.dumps({"threads": args.threads, "context": CONTEXT, "rounds": args.rounds,
                                    "flash_attn": args.flash_attn, "system_info": info().decode(),
                                    "median_ms": result, "runs_s": runs}, indent=1))
    names = list(result)
    print("k    " + "".join(f"{n:>22}" for n in names))
    for k in KS:
        print(f"{k:<5}" + "".join(f"{result[n][str(k)]:>10.1f} ms {result[n][str(k)] / result[n]['1']:>5.2f}x "
                                  for n in names))


if __name__ == "__main__":
    main()
