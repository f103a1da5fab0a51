"""The wire format between the server process and an engine process.

Messages are tuples (cheap to pickle). The child always sends a *list* of events per step so
a busy engine costs one pipe write per step, not one per token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# parent -> child
ADD = "add"  # (ADD, request_id, prompt_ids | VisionPrompt, params_dict)
CANCEL = "cancel"  # (CANCEL, request_id)
STATS = "stats"  # (STATS, token)
SHUTDOWN = "shutdown"  # (SHUTDOWN,)

# child -> parent
READY = "ready"  # (READY, info_dict)
FATAL = "fatal"  # (FATAL, message): the pipeline could not be built
OUTPUT = "out"  # (OUTPUT, request_id, seq_index, text, token_count, logprobs | None, finish | None)
END = "end"  # (END, request_id, error_kind | None, error_message | None): engine released the request
STATS_REPLY = "stats_reply"  # (STATS_REPLY, token, dict)

# error kinds carried by END
ERROR_ENGINE = "engine"  # step() raised while this request was in flight
ERROR_IGNORED = "ignored"  # the scheduler refused the request (e.g. KV cache too small)
ERROR_REFUSED = "refused"  # add_request refused the request's settings (e.g. a grammar it cannot compile)


@dataclass
class SequenceOutput:
    """New text of one sequence (choice) of a request, as the server process sees it."""

    index: int
    text: str
    token_count: int
    logprobs: list[tuple[int, str, float]] | None
    finish_reason: str | None


@dataclass
class RequestEnded:
    error_kind: str | None = None
    error_message: str | None = None


EngineEvent = SequenceOutput | RequestEnded


@dataclass
class VisionPrompt:
    """A VLM request: a VLM pipeline takes prompt text, not token ids (see ``ovserve.vision``).

    ``text`` is the rendered chat with ``<ov_genai_image_N>`` tags; ``images`` are uint8 RGB
    arrays [H, W, 3] in tag order, already shrunk by the server towards the vision encoder's input
    (``ovserve.media``), so a message stays small: numpy arrays pickle through the pipe as their
    raw bytes, never a full-size photo.
    """

    text: str
    images: list[np.ndarray]


EnginePrompt = list[int] | VisionPrompt

Params = dict[str, Any]
