"""Shared fixtures and hypothesis settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

SHARED_GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"
SHARED_AZURE = Path(__file__).resolve().parents[2] / "shared" / "data" / "azure-llm-2023"


@pytest.fixture(scope="session")
def shared_gsm8k() -> Path:
    """The GSM8K data folder beside the repository, or skip when it is absent."""
    if not (SHARED_GSM8K / "test_lengths_llama.csv").is_file():
        pytest.skip("../shared/data/gsm8k is not present")
    return SHARED_GSM8K


@pytest.fixture(scope="session")
def shared_azure_code() -> Path:
    """The Azure LLM inference trace of 2023 (code service) beside the repository, or skip when
    it is absent (it is CC BY 4.0 data, not part of the project)."""
    path = SHARED_AZURE / "AzureLLMInferenceTrace_code.csv"
    if not path.is_file():
        pytest.skip("../shared/data/azure-llm-2023 is not present")
    return path


@pytest.fixture
def svg_backend():
    """The svg backend (not the Agg the charts would pick) for the test, the previous one after."""
    import matplotlib

    previous = matplotlib.get_backend()
    matplotlib.use("svg")
    yield "svg"
    matplotlib.use(previous)
