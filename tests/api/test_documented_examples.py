"""Every example request the other servers document (``tests/fixtures/requests``) gets its status.

The bodies come from ``shared/seeds`` (OVMS, Azure AI Foundry, Databricks, Jan, MindIE) and from
the ``x-oaiMeta`` examples of OpenAI's spec, with the model renamed to tiny-llm. Each gets 200,
or the documented 4xx for what tiny-llm (text-only) or ovserve cannot do: never a 5xx.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "requests"


def _examples() -> list[Any]:
    cases = []
    for path in sorted(FIXTURES.glob("*.json")):
        for example in json.loads(path.read_text(encoding="utf-8"))["requests"]:
            cases.append(pytest.param(example, id=f"{path.stem}: {example['name']}"))
    return cases


def test_every_source_has_examples() -> None:
    sources = {path.stem for path in FIXTURES.glob("*.json")}
    assert sources == {"openai-spec", "ovms", "azure-ai-foundry", "databricks", "jan", "mindie"}


@pytest.mark.parametrize("example", _examples())
def test_documented_example_gets_its_status(server: Server, example: dict[str, Any]) -> None:
    url = f"{server.url}{example['path']}"
    stream = bool(example["body"].get("stream"))
    with httpx.stream(
        "POST",
        url,
        params=example.get("query"),
        headers=example.get("headers"),
        json=example["body"],
        timeout=120,
    ) as response:
        response.read()
    assert response.status_code == example["status"], response.text
    if response.status_code != 200:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
        return
    if stream:
        events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert not any("error" in json.loads(event) for event in events[:-1])
        assert len(events) > 2
    else:
        assert response.json()["choices"]
