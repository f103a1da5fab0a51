"""Anthropic's Messages API (``/v1/messages``): what Anthropic-SDK agents such as Claude Code speak."""
