"""Mico's Table 1 as a sensitivity study: its throughput ratios under output-length shapes of one
mean (:func:`llmsched.experiments.reproduce.mico_sensitivity`).

Mico reports neither its prompt nor its response lengths, so llmsched's reproduction assumes a
shape: GPT-2 stopping at a constant hazard (geometric lengths, mean 300, cut at the 1,024-token
context). This prints the ratios (Mico's scheme over the baseline; distribution alone; insertion
alone) under that shape and four others of the same mean: a normal of sd half the mean, a
log-normal, every output the mean, and the shape of the Azure code trace's outputs (when
``../shared/data/azure-llm-2023`` is beside the repository, or ``--trace``), each beside the
paper's Table 1.

    python benchmarks/mico_sensitivity.py [--seeds 3] [--trace FILE.csv] [--json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from llmsched.experiments.reproduce import format_mico_sensitivity, mico_sensitivity

SHARED = Path(__file__).resolve().parents[2] / "shared"
AZURE_CODE = SHARED / "data" / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="query sets per setting (default 3)")
    parser.add_argument("--trace", default=str(AZURE_CODE), help="an Azure trace: its outputs' shape")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    outputs = ["geometric", "normal", "lognormal", "constant"]
    shape = None
    if Path(args.trace).is_file():
        shape = pd.read_csv(args.trace)["GeneratedTokens"].to_numpy()
        outputs.append("empirical")
    report = mico_sensitivity(outputs, shape, seeds=args.seeds)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_mico_sensitivity(report))
        if shape is None:
            print(f"(no trace at {args.trace}: the empirical shape left out)")
        else:
            print(f"empirical: the outputs of {Path(args.trace).name}, scaled to the mean")


if __name__ == "__main__":
    main()
