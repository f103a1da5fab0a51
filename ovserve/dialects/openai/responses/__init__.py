"""OpenAI Responses API: ``/v3/responses``."""
