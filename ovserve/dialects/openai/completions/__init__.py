"""OpenAI legacy text completions: ``POST /v3/completions``."""
