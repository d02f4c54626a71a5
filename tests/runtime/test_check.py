"""llmsched runtime validate: the scaled workload, the command, and life without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch")

from llmsched.runtime import scaled_gsm8k  # noqa: E402


def test_scaled_workload() -> None:
    """GSM8K shape, lengths scaled, at least one token each."""
    wl = scaled_gsm8k(50, 0.125, seed=2)
    assert len(wl) == 50 and wl.prompt_tokens.min() >= 1 and wl.output_tokens.max() <= 64
    with pytest.raises(ValueError, match="scale"):
        scaled_gsm8k(5, 0)


def _run_with_stderr_on_a_terminal(args: list[str]) -> tuple[int, str, str]:
    """Run ``args`` with stderr on a pseudo-terminal (where one exists, else a pipe); return
    the status, stdout and what the terminal showed."""
    if not hasattr(os, "openpty"):
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr
    import fcntl
    import struct
    import termios

    terminal, child_side = os.openpty()
    # 24 rows of 100 columns: a new pseudo-terminal has no size, and tqdm draws nothing on one.
    fcntl.ioctl(child_side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    shown: list[bytes] = []

    def drain() -> None:  # read as the command writes, so that it never waits on a full terminal
        while True:
            try:
                data = os.read(terminal, 4096)
            except OSError:  # EIO: the command's side is closed
                return
            if not data:
                return
            shown.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=child_side, text=True, check=False)
    finally:
        os.close(child_side)
        reader.join()
        os.close(terminal)
    return proc.returncode, proc.stdout, b"".join(shown).decode(errors="replace")


def test_cli_runtime_validate_json() -> None:
    """llmsched runtime validate --json runs both strategies after one profile and reports,
    for the context-aware and the linear model side by side, the held-out error, the
    executed stages' error and predicted against measured makespan, with the token check;
    on a terminal a progress bar counts its steps."""
    from llmsched.cli import main

    status, stdout, stderr = _run_with_stderr_on_a_terminal(
        [
            sys.executable,
            "-c",
            "import sys; from llmsched.cli import main; sys.exit(main(sys.argv[1:]))",
            "runtime",
            "validate",
            "--model",
            "tiny",
            "--device",
            "cpu",
            "--requests",
            "10",
            "--json",
        ],
    )
    assert status == 0, stderr
    out = json.loads(stdout)
    assert out["tokens_match"] is True and out["valid"] is True and out["tokens_checked"] == 10
    # With the batch table (the default), the line in the batch is scored beside it.
    assert set(out["cost_models"]) == {"context", "linear"}
    assert set(out["fit_error"]) == {"context", "linear", "context_line"}
    assert out["profile"]["batch_table"] is True
    assert len(out["cost_models"]["context"]["decode_by_batch"]) == out["clients"]
    assert "decode_per_context" in out["cost_models"]["context"]
    assert "decode_per_context" not in out["cost_models"]["linear"]
    for errors in out["fit_error"].values():
        assert 0 <= errors["mape"] < 10 and 0 <= errors["decode_mape"] < 10
    assert set(out["strategies"]) == {"baseline", "hybrid"}
    for row in out["strategies"].values():
        for figure in ("predicted_makespan_s", "measured_makespan_s", "makespan_error", "stage_error"):
            assert set(row[figure]) == {"context", "linear"}, figure
        for model in ("context", "linear"):
            assert row["predicted_makespan_s"][model] > 0 and row["measured_makespan_s"][model] > 0
            assert row["makespan_error"][model] == pytest.approx(
                row["measured_makespan_s"][model] / row["predicted_makespan_s"][model] - 1
            )
        assert row["tokens_matched"] == 10 and row["valid"] is True
    # The held-out points are of prompt sizes and contexts not fitted on (every batch size
    # is fitted for the table).
    assert set(out["held_out"]) == {"prefill_tokens", "prompt_lengths", "decode_batches", "contexts"}
    assert out["held_out"]["decode_batches"] == [] and out["held_out"]["contexts"]
    assert len(out["machine"]["reference_iteration_s"]) == 3
    if hasattr(os, "openpty"):
        assert "runtime (tiny): 100%" in stderr and "7/7" in stderr, stderr
    assert main(["runtime", "validate", "--model", "huge"]) == 2
    assert main(["runtime", "validate", "--clients", "1"]) == 2
    assert main(["runtime", "validate", "--strategy", "fastest"]) == 2


def test_cli_runtime_validate_text(capsys) -> None:
    """The text report puts the two models side by side for one strategy, with the median
    of several executions and their range."""
    from llmsched.cli import main

    args = ["runtime", "validate", "--model", "tiny", "--requests", "6", "--clients", "3"]
    assert main([*args, "--strategy", "baseline", "--check-tokens", "2", "--executions", "3"]) == 0
    text = capsys.readouterr().out
    assert "context-aware" in text and "linear" in text and "baseline (fcfs, prefill-first)" in text
    assert "median of 3 execution(s)" in text and (" to +" in text or " to -" in text)
    assert "hybrid" not in text and "2/6 requests checked" in text
    assert "(prompt sizes and contexts not fitted on)" in text and "context, line" in text
    # Without the table: a line in the batch, and held-out batch sizes too.
    assert main([*args, "--strategy", "baseline", "--check-tokens", "1", "--no-batch-table"]) == 0
    text = capsys.readouterr().out
    assert "(sizes and contexts not fitted on)" in text and "context, line" not in text


def test_validate_reports_the_median_execution() -> None:
    """With several executions the measured makespan is their median, and the error range
    spans every execution."""
    from llmsched.runtime import validate_runtime

    out = validate_runtime("tiny", requests=6, clients=3, strategy="hybrid", executions=3, check_tokens=1)
    row = out["strategies"]["hybrid"]
    for model in ("context", "linear"):
        times = row["measured_makespans_s"][model]
        assert len(times) == 3 and row["measured_makespan_s"][model] == sorted(times)[1]
        low, high = row["makespan_error_range"][model]
        assert low <= row["makespan_error"][model] <= high
    assert out["executions"] == 3 and out["tokens_match"] and row["tokens_matched"] == 1
    with pytest.raises(ValueError, match="executions must be at least 1"):
        validate_runtime("tiny", executions=0)


def test_without_torch_the_rest_works_and_the_command_says_why() -> None:
    """With torch hidden, llmsched imports and simulates; llmsched runtime names the missing package."""
    code = (
        "import sys, importlib.abc\n"
        "class NoTorch(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ImportError('no torch here')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "import llmsched, llmsched.runtime\n"
        "from llmsched import simulate, workloads, LinearCostModel\n"
        "s = simulate(workloads.exegpt_task('S', 50), LinearCostModel.paper(), 8)\n"
        "assert s.makespan > 0 and not llmsched.runtime.torch_available()\n"
        "from llmsched.cli import main\n"
        "sys.exit(main(['runtime', 'validate']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 3, proc.stderr
    assert "needs PyTorch" in proc.stderr and "llmsched[runtime]" in proc.stderr
