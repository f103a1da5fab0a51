"""The served models: each one's engine client, tokenizer, template and limits, and the registry
that finds them by name."""
