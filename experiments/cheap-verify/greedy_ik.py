"""Greedy tokens of the same FIM prompts on mainline llama.cpp (the project venv) and on ik_llama.cpp (/work/ikvenv):
do ik_llama.cpp's kernels (run-time repacked) give the tokens mainline gives on the bundled Q4_K_M?

  .venv/bin/python greedy_ik.py mainline GGUF OUT_DIR   (writes prompts.json and mainline.json)
  /work/ikvenv/bin/python greedy_ik.py ik GGUF OUT_DIR  (writes ik.json and prints the comparison)"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

N_PROMPTS, PREFIX_CHARS, SUFFIX_CHARS, NEW_TOKENS = 10, 1200, 300, 32
FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")


def prompts(tokenizer_dir: Path) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    files = [p for p in files if 20_000 < p.stat().st_size < 100_000][:N_PROMPTS]
    out = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        cut = text.index("\n", len(text) // 2) + 1  # a line start in the middle of the file
        fim = f"{FIM[0]}{text[cut - PREFIX_CHARS:cut]}{FIM[1]}{text[cut:cut + SUFFIX_CHARS]}{FIM[2]}"
        out.append(tokenizer.encode(fim))
    return out


def mainline(gguf: Path, out: Path) -> None:
    from codespec.decode.runtimes.llamacpp import LlamaCppRuntime

    ids = prompts(gguf.parent)
    (out / "prompts.json").write_text(json.dumps(ids))
    runtime = LlamaCppRuntime(gguf, threads=2, slots=1)
    results = []
    for prompt in ids:
        runtime.reset()
        logits = runtime.forward(prompt, logits=1)
        tokens = []
        for _ in range(NEW_TOKENS):
            tokens.append(int(logits[-1].argmax()))
            logits = runtime.forward(tokens[-1:], logits=1)
        results.append(tokens)
    (out / "mainline.json").write_text(json.dumps(results))


def ik(gguf: Path, out: Path) -> None:
    import numpy as np
    from ik_llama_cpp import _ctypes_api as C
    from ik_llama_cpp._internals import IkContext, IkModel

    model = IkModel(str(gguf), use_mmap=True, n_gpu_layers=0)
    params = C.llama_model_default_params()
    params.use_mmap, params.repack_tensors, params.n_gpu_layers = False, True, 0
    C.llama_free_model(model.model)
    model._model = C.llama_model_load_from_file(str(gguf).encode(), params)
    ctx = IkContext(model, n_ctx=2048, n_threads=2, flash_attn=False)
    n_vocab = model.n_vocab
    results = []
    for prompt in json.loads((out / "prompts.json").read_text()):
        C.llama_kv_cache_clear(ctx.ctx)
        tokens: list[int] = []
        feed, pos = prompt, 0
        for _ in range(NEW_TOKENS):
            batch = C.llama_batch_init(len(feed), 0, 1)
            batch.n_tokens = len(feed)
            for i, token in enumerate(feed):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos + i, 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if i == len(feed) - 1 else 0
            assert ctx.decode(batch) == 0
            C.llama_batch_free(batch)
            pos += len(feed)
            best = int(np.ctypeslib.as_array(C.llama_get_logits_ith(ctx.ctx, -1), shape=(n_vocab,)).argmax())
            tokens.append(best)
            feed = [best]
        results.append(tokens)
    (out / "ik.json").write_text(json.dumps(results))
    reference = json.loads((out / "mainline.json").read_text())
    same = sum(a == b for a, b in zip(reference, results, strict=True))
    firsts = [next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
              for a, b in zip(reference, results, strict=True)]
    print(json.dumps({"prompts": len(results), "identical": same, "first_divergence": firsts}))


if __name__ == "__main__":
    {"mainline": mainline, "ik": ik}[sys.argv[1]](Path(sys.argv[2]), Path(sys.argv[3]))
