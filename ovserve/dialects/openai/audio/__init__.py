"""OpenAI's audio API: /audio/transcriptions and /audio/translations (multipart uploads)."""
