"""OpenAI chat completions: ``POST /v3/chat/completions``."""
