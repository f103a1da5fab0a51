"""OpenAI's Batch API: JSONL files of requests run through the request envelope at a lower priority."""
