"""OpenAI's image generation and editing (``/images/generations``, ``/images/edits``), with OVMS's extras."""
