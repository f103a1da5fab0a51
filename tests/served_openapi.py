"""Real answers checked against the server's own ``GET /openapi.json``: its success schemas."""

from __future__ import annotations

from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

_BASE = "urn:ovserve-openapi"
JSON = "application/json"
EVENTS = "text/event-stream"


class ServedSchemas:
    """Validators of one served document's 200 answers, by path and media type."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        resource = Resource.from_contents(document, default_specification=DRAFT202012)
        self._registry = Registry().with_resource(_BASE, resource)

    def validate_answer(
        self, path: str, body: Any, media: str = JSON, *, method: str = "post", status: str = "200"
    ) -> None:
        """Raise ``jsonschema.ValidationError`` unless ``body`` (one event's data for ``EVENTS``)
        matches what the document says ``method path`` answers with (``path`` as the document
        writes it, e.g. ``/v3/models/{name}``)."""
        schema = self.document["paths"][path][method]["responses"][status]["content"][media]["schema"]
        self._validator(schema["$ref"]).validate(body)

    def validate_component(self, name: str, body: Any) -> None:
        self._validator(f"#/components/schemas/{name}").validate(body)

    def _validator(self, ref: str) -> jsonschema.Draft202012Validator:
        return jsonschema.Draft202012Validator({"$ref": _BASE + ref}, registry=self._registry)
