"""HTTP only: routes, JSON bodies, SSE, API keys, drain, slow-client timeouts and the app keys.

The request schemas live in ``ovserve.dialects.openai.request``; nothing below this package imports it.
"""
