"""Ollama's native API (``/api/chat``, ``/api/generate``, ``/api/embed``, the model listings): its
request models, its adapter onto the generation core, its response models. See docs/ollama.md."""
