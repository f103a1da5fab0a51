"""PromptTokenizer's one owner thread: no first-use deadlock in fresh processes.

Here rather than in ``tests/unit``: each attempt is a fresh Python process that imports OpenVINO
(seconds each), so it belongs with the layer that starts processes.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

# 16 threads released at once onto a tokenizer nobody has used yet: the raw binding (encode, then
# input_ids.data) hung in 2 of the first 3 fresh processes tried on this machine.
_FIRST_USE_BURST = textwrap.dedent(
    """
    import sys, threading
    import openvino_genai
    from ovserve.models.tokenizer import PromptTokenizer

    tokenizer = PromptTokenizer(openvino_genai.Tokenizer(sys.argv[1]), "probe")
    barrier = threading.Barrier(16)
    results = {}

    def encode(index):
        barrier.wait()
        results[index] = tokenizer.encode_blocking(f"request {index} says hello", add_special_tokens=False)

    threads = [threading.Thread(target=encode, args=(index,)) for index in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 16 and all(results.values())
    print("ok")
    """
)


@pytest.mark.slow
def test_concurrent_first_use_in_fresh_processes_never_deadlocks(tiny_llm: Path) -> None:
    for attempt in range(8):
        result = subprocess.run(
            [sys.executable, "-c", _FIRST_USE_BURST, str(tiny_llm)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert result.returncode == 0 and result.stdout.strip() == "ok", (attempt, result.stderr)
