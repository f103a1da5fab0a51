"""What crosses the pipe for a request, and what the server reports from the engine's answers."""

from __future__ import annotations

import logging

import pytest

from ovserve.core.generation_config import GenerationParams
from ovserve.engine.spec import PipelineKind
from tests.fast.harness import fast_model
from tests.fast.scripted_engine import reply


async def test_the_engine_gets_the_prompt_ids_and_the_resolved_generation_params(serve, messages) -> None:
    fast = fast_model(defaults={"top_k": 20, "repetition_penalty": 1.1})
    served = await serve(fast)
    status, body = await served.chat(
        messages=messages, temperature=0.3, top_p=0.9, max_tokens=7, seed=5, stop=["\n\n"], logprobs=True
    )
    assert status == 200, body
    (add,) = served.engine.adds()
    assert add.prompt == [ord(char) for char in fast.model.render_chat(messages, None, None)]
    params = add.params
    assert isinstance(params, GenerationParams)
    assert (params.temperature, params.top_p, params.max_new_tokens, params.seed) == (0.3, 0.9, 7, 5)
    assert (params.top_k, params.repetition_penalty) == (20, 1.1)  # from generation_config.json
    assert params.stop == ("\n\n",) and params.logprobs and params.n == 1 and not params.beam_search
    assert body["choices"][0]["logprobs"]["content"][0] == {
        "token": "H",
        "logprob": -0.5,
        "bytes": [72],
        "top_logprobs": [],
    }


async def test_metrics_report_the_engine_s_own_counters(serve, messages) -> None:
    served = await serve(fast_model())
    async with served.client.get("/metrics") as response:
        text = await response.text()
    assert 'ovserve_engine_ready{model="fast-model"} 1' in text
    assert 'ovserve_engine_requests{model="fast-model"} 0' in text  # from the engine's StatsReply
    assert 'ovserve_engine_handles{model="fast-model"} 0' in text
    assert "ovserve_draft_" not in text  # not a drafting pipeline


async def test_drafting_acceptance_is_logged_per_request_and_totalled_in_metrics(
    serve, messages, caplog: pytest.LogCaptureFixture
) -> None:
    # Each main-model step of a drafting pipeline yields the verified token plus accepted drafts.
    fast = fast_model(reply("one ", "two ", "three", tokens=3), kind=PipelineKind.SPECULATIVE)
    served = await serve(fast)
    caplog.set_level(logging.INFO, logger="ovserve.engine.client")
    status, body = await served.chat(messages=messages)
    assert status == 200, body
    request_id = served.engine.adds()[0].request_id
    line = f"request {request_id} on 'fast-model' (speculative): 9 tokens in 3 steps, 6 draft tokens accepted"
    assert f"{line} of 15 drafted" in caplog.messages
    # n > 1 is not counted: its outputs are not one per step.
    await served.chat(messages=messages, n=2, temperature=0.5)
    async with served.client.get("/metrics") as response:
        text = await response.text()
    assert 'ovserve_draft_accepted_tokens_total{model="fast-model"} 6' in text
    assert 'ovserve_draft_proposed_tokens_total{model="fast-model"} 15' in text  # 3 steps x 5 drafted
    assert 'ovserve_draft_verify_steps_total{model="fast-model"} 3' in text
