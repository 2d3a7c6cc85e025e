"""The ik_llama.cpp runtime: the llama.cpp runtime's loop on ik_llama.cpp's CPU kernels (ik-llama-cpp-python).

Why a second llama.cpp: verifying drafts is a forward over k tokens, and ik_llama.cpp's CPU matrix products
handle a few tokens per pass over the weights where mainline's, for the Q6_K tensors of a Q4_K_M file, go token
by token; with its weights repacked at load it is also faster for one token and for a prefill chunk
(experiments/cheap-verify/log.md, the same minutes on the same 2 cores, bundled 1.5B: k = 1 / 8 / 64 tokens
30 / 105 / 728 ms against mainline's 41-44 / 246-253 / 862-881 ms). Everything but the C API is the llama.cpp runtime's (batches with logits
only where verified, slots as sequences of one KV cache, the guards before native code). ik_llama.cpp keeps the
older API: its KV cache is per context (`llama_kv_cache_seq_*`), shared by all sequences, so a copied slot
shares its cells there too. The package binds only part of that API; the rest is bound here from its library."""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from pathlib import Path
from typing import Any

from codespec.decode.runtimes import Runtime
from codespec.decode.runtimes.llamacpp import (
    DEFAULT_CONTEXT,
    DEFAULT_SLOTS,
    MAX_BATCH,
    MEMORY_CONTEXTS,
    LlamaCppRuntime,
    abort_setter,
    stderr_log,
)
from codespec.errors import CodespecError

INSTALL_HINT = "ik-llama-cpp-python is not installed (pip install 'codespec[local]', or `make venv`)"
_BACKEND = threading.Lock()
_api: Any = None
_log_callback = None  # kept referenced: the library calls it from native code


def ik_available() -> bool:
    try:
        _library()
    except CodespecError:
        return False
    return True


@functools.cache  # one library per process: read once, not on every stats request
def kernel_features() -> str:
    """The instruction sets the loaded library was built for ("AVX2", or "AVX2 AVX512 AVX512_VNNI ..." for a
    native build): PyPI's wheel is built for AVX2, `make venv` builds it for this CPU; each has its own costs."""
    info = _library()._lib.llama_print_system_info().decode()
    on = [name.strip() for name, _, value in (part.partition("=") for part in info.split("|")) if value.strip() == "1"]
    return " ".join(name for name in on if name.startswith(("AVX", "FMA", "F16C", "NEON", "SVE", "MATMUL")))


@functools.cache
def library_stops_forwards() -> bool:
    """Whether a cancel may stop a forward part-way: only in a build with build-support/ik-abort-at-node.patch
    (`make venv` applies it), whose marker function says so. The stock compute loop reads the abort status
    after each node's barrier, where the first thread may already have set it while computing the *next* node:
    the other thread leaves the graph and the first waits at that node's barrier forever (a replay hung; gdb:
    the worker in GOMP's barrier, the pool thread idle). The patch stops all threads at one node, as mainline
    does. Without it a cancel is seen between two forwards, as before."""
    try:
        return bool(_library()._lib.ggml_codespec_abort_at_node())
    except AttributeError:  # dlsym found no such function: a build without the patch
        return False


def _library() -> Any:
    """ik_llama_cpp's ctypes module, with the functions it does not bind bound here; the backend set up once."""
    global _api, _log_callback
    with _BACKEND:
        if _api is not None:
            return _api
        try:
            from ik_llama_cpp import _ctypes_api as api
        except ImportError:
            raise CodespecError(INSTALL_HINT) from None
        except OSError as exc:  # the package is there but its shared library does not load
            raise CodespecError(f"ik_llama.cpp's native library does not load ({exc}): {INSTALL_HINT}") from None
        lib = api._lib
        signatures = {
            "llama_kv_cache_seq_rm": ([ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32], ctypes.c_bool),
            "llama_kv_cache_seq_cp": ([ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                       ctypes.c_int32], None),
            "llama_n_ctx_train": ([ctypes.c_void_p], ctypes.c_int32),
            "llama_n_layer": ([ctypes.c_void_p], ctypes.c_int32),
            "llama_model_meta_val_str": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t],
                                         ctypes.c_int32),
            "llama_print_system_info": ([], ctypes.c_char_p),
        }
        for name, (argtypes, restype) in signatures.items():
            function = getattr(lib, name)
            function.argtypes, function.restype = argtypes, restype
        callback_type = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
        _log_callback = callback_type(stderr_log(b"ik_llama.cpp: "))
        lib.llama_log_set.argtypes, lib.llama_log_set.restype = [callback_type, ctypes.c_void_p], None
        lib.llama_log_set(_log_callback, None)
        api.llama_backend_init()
        _api = api
        return api


class IkLlamaCppRuntime(LlamaCppRuntime):
    """The llama.cpp runtime's forward, truncation and slots over ik_llama.cpp's C API (set up here, and the
    sequence operations below)."""

    name = "ik-llamacpp"

    def __init__(self, gguf_path: str | Path, *, threads: int | None = None, context: int = DEFAULT_CONTEXT,
                 slots: int = DEFAULT_SLOTS, repack: bool = True) -> None:
        Runtime.__init__(self)  # not LlamaCppRuntime's: that one loads mainline's library
        self.max_slots = max(1, slots)
        api = self._lib = _library()
        path = Path(gguf_path)
        if not path.is_file():
            raise CodespecError(f"GGUF file not found: {path}")
        model_params = api.llama_model_default_params()
        model_params.n_gpu_layers = 0
        # Run-time repacking (llama-server's -rtr): the weights are rearranged at load into the fork's row-
        # interleaved types, the same numbers in the order its kernels read fastest; measured on the bundled
        # Q4_K_M: a step 30 ms against mainline's 41-44 ms, 8 tokens 105 ms against 246-253 ms. It needs the
        # weights in memory, not mapped from the file (+1.1 GB resident for the 1.5B, as mapped pages become).
        self.repack = repack
        if repack:
            model_params.use_mmap, model_params.repack_tensors = False, True
        self._model = api.llama_model_load_from_file(str(path).encode(), model_params)
        if not self._model:
            raise CodespecError(f"ik_llama.cpp cannot read {path.name} (not a GGUF it supports, or truncated)")
        self.threads = threads or max(os.cpu_count() or 1, 1)
        lib = api._lib
        trained = lib.llama_n_ctx_train(self._model)
        self.max_positions = min(context, trained) if trained > 0 else context
        self.memory_tokens = self.max_positions * (MEMORY_CONTEXTS if self.max_slots > 1 else 1)
        ctx_params = api.llama_context_default_params()
        ctx_params.n_ctx = self.memory_tokens
        ctx_params.n_batch = ctx_params.n_ubatch = MAX_BATCH
        ctx_params.n_seq_max = self.max_slots
        ctx_params.n_threads = ctx_params.n_threads_batch = self.threads
        ctx_params.flash_attn = False  # measured: no faster for these batch sizes on the CPU
        self._ctx = api.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            api.llama_free_model(self._model)
            raise CodespecError(f"ik_llama.cpp cannot create a context of {self.max_positions} tokens for {path.name}")
        self.vocab_size = api.llama_vocab_n_tokens(api.llama_model_get_vocab(self._model))
        # f16 keys and values: 2 bytes x 2 x layers x the KV width (heads_kv x head size), from the GGUF's metadata.
        arch = self._meta("general.architecture")
        embd, heads = int(self._meta(f"{arch}.embedding_length") or 0), int(self._meta(f"{arch}.attention.head_count") or 1)
        kv_heads = int(self._meta(f"{arch}.attention.head_count_kv") or heads)
        self._kv_bytes = 4 * lib.llama_n_layer(self._model) * (embd // max(heads, 1)) * kv_heads
        self._batch = api.llama_batch_init(MAX_BATCH, 0, 1)
        self.path = path
        self.stops_forwards = library_stops_forwards()
        self._set_abort = abort_setter(lib) if self.stops_forwards else None
        self.interrupt_with(None)

    def interrupt_with(self, cancel) -> None:
        if not self.stops_forwards:  # a build whose stop can hang (library_stops_forwards): never part-way
            self._interrupt = None
            return
        super().interrupt_with(cancel)

    def _meta(self, key: str) -> str:
        buffer = ctypes.create_string_buffer(128)
        size = self._lib._lib.llama_model_meta_val_str(self._model, key.encode(), buffer, len(buffer))
        return buffer.value.decode() if size >= 0 else ""

    def _seq_rm(self, seq: int, start: int, end: int) -> bool:
        return bool(self._lib._lib.llama_kv_cache_seq_rm(self._ctx, seq, start, end))

    def _seq_cp(self, source: int, target: int, start: int, end: int) -> None:
        self._lib._lib.llama_kv_cache_seq_cp(self._ctx, source, target, start, end)

    def _free_model(self) -> None:
        self._lib.llama_free_model(self._model)

    def describe_settings(self) -> dict:
        # Repacked weights and each build's kernels (AVX2 wheel, native AVX-512) have their own cost curve.
        return {**super().describe_settings(), "repack": self.repack, "kernels": kernel_features()}

    def describe(self) -> dict:
        return {**super().describe(), "repack": self.repack, "kernels": kernel_features()}
