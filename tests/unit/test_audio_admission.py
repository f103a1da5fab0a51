"""Audio requests in flight per model are bounded by --max_queued_requests (each holds its samples)."""

from __future__ import annotations

import pytest

from ovserve.dialects.openai.audio.adapter import AudioService
from ovserve.errors import TooManyRequestsError
from ovserve.models.served import ModelRegistry


def test_requests_beyond_the_bound_are_429s_and_released_slots_are_reused() -> None:
    service = AudioService(ModelRegistry([]), max_audio_seconds=60, max_queued_requests=2)
    with service.admitted("whisper"), service.admitted("whisper"):
        with pytest.raises(TooManyRequestsError) as raised, service.admitted("whisper"):
            pass
        assert raised.value.status == 429
        with service.admitted("other"):  # per model
            pass
    with service.admitted("whisper"):
        pass
    assert service._in_flight == {}  # no client-chosen name is kept at zero
