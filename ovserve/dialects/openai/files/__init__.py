"""OpenAI's Files API: uploads kept on disk, their metadata in SQLite, owned per API key."""
