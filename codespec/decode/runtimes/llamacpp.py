"""The llama.cpp runtime: a GGUF target on llama.cpp's CPU kernels through llama-cpp-python's C API.

One llama_batch per forward with the logits flag set only on the positions to verify (no n_ctx x vocab
logits buffer), rollback by removing the sequence's positions past n. Each cached prompt (slot) is a
llama.cpp sequence in one unified KV memory: a slot copied from another shares its cells
(`llama_memory_seq_cp` tags them, nothing is copied), so places that share a file's context hold it once.
Inputs that would make the native code abort the process (a batch past the context, an empty batch, a
position gap) are refused here with a Python error before they reach it."""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from codespec.decode.runtimes import ForwardInterrupted, Runtime, distinct_tokens
from codespec.errors import CodespecError

BUILD_HINT = ("llama-cpp-python is not installed (it builds from source: `make venv`, or "
              "CMAKE_ARGS=\"-DGGML_NATIVE=ON -DLLAMA_CURL=OFF\" pip install llama-cpp-python==0.3.36)")
DEFAULT_CONTEXT = 4096
MAX_BATCH = 512
DEFAULT_SLOTS = 8
# The KV memory all slots share, in units of one prompt's context: places of one file share its context
# block, so the distinct tokens they hold stay well under slots x context.
MEMORY_CONTEXTS = 2
_BACKEND = threading.Lock()
_backend_ready = False
_log_callback = None  # kept referenced: llama.cpp calls it from native code
# ggml.h's enum ggml_log_level (mainline's and ik_llama.cpp's alike; llama-cpp-python's comment of it is older).
GGML_LOG_LEVEL_ERROR, GGML_LOG_LEVEL_CONT = 4, 5


# The cancel token of the forward this thread is in (the log callback runs in it, inside llama_decode).
_in_forward = threading.local()


def stderr_log(prefix: bytes) -> Callable[[int, bytes | None, object], None]:
    """A llama.cpp log callback: only errors (and the lines that continue them) reach stderr, which is the
    server's log; CODESPEC_LLAMA_LOG shows everything (the load chatter and warnings are long). The errors a
    forward stopped by its cancel logs ("failed to compute graph") are that stop, not a fault: not shown."""
    last = 0  # the level a continuation line continues

    def log(level: int, text: bytes | None, _user: object) -> None:
        nonlocal last
        shown = level == GGML_LOG_LEVEL_ERROR or (level == GGML_LOG_LEVEL_CONT and last == GGML_LOG_LEVEL_ERROR)
        cancel = getattr(_in_forward, "cancel", None)
        shown = shown and not (cancel is not None and cancel.cancelled)
        if level != GGML_LOG_LEVEL_CONT:
            last = level
        if text and (shown or os.environ.get("CODESPEC_LLAMA_LOG")):
            os.write(2, prefix + text)

    return log


# How a forward is stopped part-way (Runtime.interrupt_with): llama.cpp's first compute thread calls an abort
# callback between two graph nodes and ends the forward when it returns true. The callback must not be Python:
# a ctypes callback would take the GIL at every node (~600 a forward), from a native thread, while the event
# loop holds it. libc's strlen does the job without Python: its argument is the CancelToken's flag, a C string
# that is empty (0: go on) until the token is cancelled (1: stop); the 0 or 1 it returns in the return register
# reads as the C bool the callback type asks for.
_NEVER = ctypes.create_string_buffer(2)  # the flag of "no cancel": stays empty


@functools.cache
def _strlen() -> int:
    return ctypes.cast(ctypes.CDLL(None).strlen, ctypes.c_void_p).value or 0


def abort_setter(library: ctypes.CDLL) -> Callable[[int, int, int], None]:
    """The library's llama_set_abort_callback(ctx, callback, data), bound with plain pointers (item access makes
    a function object of our own: the package's binding keeps its argument types)."""
    function = library["llama_set_abort_callback"]
    function.argtypes, function.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p], None
    return function


def llamacpp_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except Exception:  # ImportError, or a broken native library (OSError)
        return False
    return True


def _library():
    try:
        from llama_cpp import llama_cpp
    except ImportError:
        raise CodespecError(BUILD_HINT) from None
    except OSError as exc:  # the package is there but its shared library does not load
        raise CodespecError(f"llama-cpp-python's native library does not load ({exc}); reinstall it: "
                            f"{BUILD_HINT}") from None
    global _backend_ready, _log_callback
    with _BACKEND:
        if not _backend_ready:
            _log_callback = llama_cpp.llama_log_callback(stderr_log(b"llama.cpp: "))
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _backend_ready = True
    return llama_cpp


class LlamaCppRuntime(Runtime):
    name = "llamacpp"
    # Quantized kernels quantize a batch's activations and sum in another order than a single token's.
    exact_batching = False
    prefill_chunk = 64
    stops_forwards = True  # ggml's abort callback, between two graph nodes (interrupt_with)

    def __init__(self, gguf_path: str | Path, *, threads: int | None = None, context: int = DEFAULT_CONTEXT,
                 slots: int = DEFAULT_SLOTS) -> None:
        super().__init__()
        self.max_slots = max(1, slots)
        lib = self._lib = _library()
        path = Path(gguf_path)
        if not path.is_file():
            raise CodespecError(f"GGUF file not found: {path}")
        model_params = lib.llama_model_default_params()
        model_params.n_gpu_layers = 0
        self._model = lib.llama_model_load_from_file(str(path).encode(), model_params)
        if not self._model:
            raise CodespecError(f"llama.cpp cannot read {path.name} (not a GGUF it supports, or truncated)")
        self.threads = threads or max(os.cpu_count() or 1, 1)
        trained = lib.llama_model_n_ctx_train(self._model)
        self.max_positions = min(context, trained) if trained > 0 else context
        ctx_params = lib.llama_context_default_params()
        self.memory_tokens = self.max_positions * (MEMORY_CONTEXTS if self.max_slots > 1 else 1)
        ctx_params.n_ctx = self.memory_tokens
        ctx_params.n_batch = ctx_params.n_ubatch = MAX_BATCH
        ctx_params.n_seq_max = self.max_slots
        ctx_params.kv_unified = True  # one cell pool: a copied sequence shares its cells
        ctx_params.n_threads = ctx_params.n_threads_batch = self.threads
        ctx_params.no_perf = True
        self._ctx = lib.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            lib.llama_model_free(self._model)
            raise CodespecError(f"llama.cpp cannot create a context of {self.max_positions} tokens for {path.name}")
        self.vocab_size = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self._model))
        # f16 keys and values: 2 bytes x 2 x layers x the KV width (heads_kv x head size).
        embd, heads = lib.llama_model_n_embd(self._model), lib.llama_model_n_head(self._model)
        kv_heads = lib.llama_model_n_head_kv(self._model)
        self._kv_bytes = 4 * lib.llama_model_n_layer(self._model) * (embd // max(heads, 1)) * kv_heads
        self._memory = lib.llama_get_memory(self._ctx)
        self._batch = lib.llama_batch_init(MAX_BATCH, 0, 1)
        self.path = path
        self._set_abort = abort_setter(lib._lib)
        self.interrupt_with(None)

    def interrupt_with(self, cancel) -> None:
        # The token itself is kept: native code reads its flag during every forward until the next call.
        self._interrupt = cancel
        self._set_abort(self._ctx, _strlen(), ctypes.addressof(cancel.flag if cancel is not None else _NEVER))

    def forward(self, tokens: Sequence[int], logits: int) -> torch.Tensor:
        lib = self._lib
        n = len(tokens)
        if n == 0:
            raise CodespecError("llama.cpp forward over no tokens")
        if n > MAX_BATCH:
            raise CodespecError(f"llama.cpp forward over {n} tokens: at most {MAX_BATCH} per batch")
        if not 1 <= logits <= n:
            raise CodespecError(f"logits for {logits} of {n} positions")
        start = len(self.cached)
        if start + n > self.max_positions:
            raise CodespecError(f"{start + n} tokens exceed the llama.cpp context of {self.max_positions}")
        bad = [t for t in tokens if not 0 <= int(t) < self.vocab_size]
        if bad:
            raise CodespecError(f"token id {bad[0]} is outside the model's vocabulary of {self.vocab_size}")
        # Room for the batch: other places' slots go first, least recently used first (without this, llama.cpp
        # would log an error before refusing the batch; the refusal is still handled below).
        # (The sum of the slots' lengths bounds the cells they hold: the exact count only when it could be full.)
        while (sum(len(slot.tokens) for slot in self.slots) + n > self.memory_tokens
               and distinct_tokens([slot.tokens for slot in self.slots]) + n > self.memory_tokens
               and self.evict_one()):
            pass
        batch, seq = self._batch, self.active
        for i, token in enumerate(tokens):
            batch.token[i] = int(token)
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = i >= n - logits
        batch.n_tokens = n
        _in_forward.cancel = self._interrupt
        try:
            status = lib.llama_decode(self._ctx, batch)
            # 1: no room in the KV memory for the batch; other places' slots make room, least recently used first.
            while status == 1 and self.evict_one() and not self._interrupted():
                status = lib.llama_decode(self._ctx, batch)
        finally:
            _in_forward.cancel = None
        if self._interrupted():
            # Stopped part-way (mainline's llama_decode returns 2; ik_llama.cpp's may return 0 with whatever the
            # graph got to), or cancelled just after: either way this forward's
            # cells go, so the cache holds exactly `cached` and the next prompt is computed as if cold.
            self._seq_rm(seq, start, -1)
            raise ForwardInterrupted(f"forward over {n} tokens at {start} stopped: its request was cancelled")
        if status != 0:
            # Anything it kept of a failed batch is dropped, so the cache again holds exactly `cached`.
            self._seq_rm(seq, start, -1)
            raise CodespecError(f"llama_decode failed with status {status} at {start} + {n} tokens")
        rows = np.empty((logits, self.vocab_size), dtype=np.float32)
        for row, index in enumerate(range(n - logits, n)):
            pointer = lib.llama_get_logits_ith(self._ctx, index)
            if not pointer:
                raise CodespecError(f"llama.cpp has no logits for batch position {index}")
            rows[row] = np.ctypeslib.as_array(pointer, shape=(self.vocab_size,))
        self.cached.extend(int(t) for t in tokens)
        return torch.from_numpy(rows)

    def _interrupted(self) -> bool:
        return self._interrupt is not None and self._interrupt.cancelled

    def truncate(self, length: int) -> None:
        length = max(length, 0)
        if length < len(self.cached):
            if not self._seq_rm(self.active, length, -1):
                self._seq_rm(self.active, -1, -1)
                del self.cached[:]
                return
            del self.cached[length:]

    def _copy_slot(self, source: int, target: int, length: int) -> None:
        self._seq_rm(target, -1, -1)
        if length:
            self._seq_cp(source, target, 0, length)

    def _clear_slot(self, index: int) -> None:
        self._seq_rm(index, -1, -1)

    # The KV memory's sequence operations: the one place the mainline API names them.
    def _seq_rm(self, seq: int, start: int, end: int) -> bool:
        return bool(self._lib.llama_memory_seq_rm(self._memory, seq, start, end))

    def _seq_cp(self, source: int, target: int, start: int, end: int) -> None:
        self._lib.llama_memory_seq_cp(self._memory, source, target, start, end)

    def _free_model(self) -> None:
        self._lib.llama_model_free(self._model)

    def kv_bytes_per_token(self) -> int:
        return self._kv_bytes

    def describe_settings(self) -> dict:
        # The file is part of the key of its cost curve: a spec whose requantized file is missing serves the
        # bundled one, and that file's curve must not be kept under the other's name (or the other way round).
        return {"runtime": self.name, "threads": self.threads, "gguf": f"{self.path.parent.name}/{self.path.name}:{self.path.stat().st_size}"}

    def describe(self) -> dict:
        return {**super().describe(), "gguf": self.path.name, "threads": self.threads,
                "context": self.max_positions, "kvMemoryTokens": self.memory_tokens, "slots": self.max_slots,
                "stopsForwards": self.stops_forwards}

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._free_model()
            self._ctx = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass
