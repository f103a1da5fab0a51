"""Every route that touches a model comes in through the one request envelope (``ovserve.api.envelope``):
body, parsing, admission, the model's lease, deadline, metrics and errors are written once. A new
route that reaches a model any other way fails here; a route that touches none says why below."""

from __future__ import annotations

from ovserve.api.table import ROUTES

# Routes that touch no model's engine nor tokenizer, and why.
NO_MODEL_WORK = {
    ("GET", "/responses/{response_id}"): "reads the Responses store only",
    ("DELETE", "/responses/{response_id}"): "deletes from the Responses store only",
    ("POST", "/files"): "writes an upload to the files store only",
    ("GET", "/files"): "lists the files store only",
    ("GET", "/files/{file_id}"): "reads the files store only",
    ("DELETE", "/files/{file_id}"): "deletes from the files store only",
    ("GET", "/files/{file_id}/content"): "reads a file from disk only",
    ("POST", "/batches"): "writes a batch; its lines come in through the envelope (envelope.answer_body)",
    ("GET", "/batches"): "lists the batches store only",
    ("GET", "/batches/{batch_id}"): "reads the batches store only",
    ("POST", "/batches/{batch_id}/cancel"): "cancels a batch's lines (they release their own work)",
    ("GET", "/models"): "lists the configuration",
    ("GET", "/models/{name}"): "describes a model from its configuration",
    ("POST", "/models/{name}/unload"): "unloads: holds no engine, waits for the requests that hold it",
    ("POST", "/v1/config/reload"): "applies config.json",
    ("GET", "/v2/health/live"): "a probe",
    ("GET", "/v2/health/ready"): "a probe",
    ("GET", "/v2/models/{name}/ready"): "a probe: reads the engine's state",
    ("GET", "/health"): "a probe",
    ("GET", "/metrics"): "reads counters (engines' reports, at most 0.5 s each)",
    ("GET", "/openapi.json"): "the API's description",
    ("GET", "/"): "Ollama's liveness answer, or the console's page",
    ("GET", "/console"): "a redirect to the console's page",
    ("GET", "/console/"): "the console's page (a static file)",
    ("GET", "/console/static/{file}"): "the console's static files",
    ("GET", "/console/api/logs"): "the recent warnings and errors",
    ("GET", "/console/api/info"): "lists the configuration and the memory budget",
    ("GET", "/api/tags"): "lists the configuration",
    ("GET", "/api/ps"): "lists the loaded models",
    ("POST", "/api/show"): "describes a model from its files",
    ("GET", "/api/version"): "a constant",
    ("POST", "/api/pull"): "refused: no model store",
    ("POST", "/api/push"): "refused: no model store",
    ("POST", "/api/create"): "refused: no model store",
    ("POST", "/api/copy"): "refused: no model store",
    ("DELETE", "/api/delete"): "refused: no model store",
}


def test_every_route_that_touches_a_model_comes_in_through_the_envelope() -> None:
    outside = [
        f"{route.method} {route.path}"
        for route in ROUTES
        if not route.enveloped and (route.method, route.path) not in NO_MODEL_WORK
    ]
    assert outside == [], "these routes reach a model outside the request envelope"


def test_the_exempt_routes_exist_and_stay_outside_the_envelope() -> None:
    by_key = {(route.method, route.path): route for route in ROUTES}
    assert set(NO_MODEL_WORK) <= set(by_key), "an exempt route no longer exists: drop it from the list"
    assert not any(by_key[key].enveloped for key in NO_MODEL_WORK)


def test_the_generation_retrieval_audio_and_tokenizer_routes_are_enveloped() -> None:
    enveloped = {(route.method, route.path) for route in ROUTES if route.enveloped}
    for path in (
        "/chat/completions",
        "/completions",
        "/responses",
        "/embeddings",
        "/rerank",
        "/tokenize",
        "/detokenize",
        "/audio/transcriptions",
        "/audio/translations",
        "/audio/speech",
        "/messages",
        "/messages/count_tokens",
        "/models/{name}/load",
        "/api/chat",
        "/api/generate",
        "/api/embed",
        "/api/embeddings",
    ):
        assert ("POST", path) in enveloped, path
