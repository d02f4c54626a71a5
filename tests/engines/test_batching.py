"""The named batching rules: each name gives its engine's rule with its knobs."""

from __future__ import annotations

import pytest

from llmsched.engines.batching import BATCHING, SarathiRule, batching_rule
from llmsched.engines.fusion.rule import FusionRule
from llmsched.engines.orca.rule import OrcaRule
from llmsched.engines.vllm.rule import VLLMChunkedRule, VLLMRule


def test_each_name_gives_its_rule_with_the_token_count() -> None:
    assert BATCHING == ("vllm", "sarathi", "orca", "padded")
    vllm = batching_rule("vllm", 1024)
    assert type(vllm) is VLLMRule and vllm.token_cap == 1024
    chunked = batching_rule("vllm", 1024, chunked_prefill=True)
    assert type(chunked) is VLLMChunkedRule and chunked.token_budget == 1024
    sarathi = batching_rule("sarathi", 512)
    assert type(sarathi) is SarathiRule and isinstance(sarathi, FusionRule) and sarathi.token_budget == 512
    orca = batching_rule("orca", 2048)
    assert type(orca) is OrcaRule and orca.token_budget == 2048


def test_bad_names_and_knobs_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown batching rule 'tgi'; expected one of vllm, sarathi, orca"):
        batching_rule("tgi")
    with pytest.raises(ValueError, match="orca runs whole prompts"):
        batching_rule("orca", chunked_prefill=True)
    with pytest.raises(TypeError, match="chunked_prefill must be True or False"):
        batching_rule("vllm", chunked_prefill=1)  # type: ignore[arg-type]
