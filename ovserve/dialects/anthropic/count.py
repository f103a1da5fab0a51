"""``POST /v1/messages/count_tokens`` as an endpoint of the request envelope: the prompt tokens a
Messages request would have (the model's own template, tools and tokenizer), with no engine work:
tokenizer work only, which answers whether the model is loaded or not and loads nothing."""

from __future__ import annotations

from ovserve.core.engine_work import TokenizerWork
from ovserve.dialects.anthropic import response as body
from ovserve.dialects.anthropic.adapter import MessagesEndpoint
from ovserve.dialects.anthropic.request import PromptRequest
from ovserve.dialects.endpoint import UnaryEndpoint, WorkCall
from ovserve.models.served import ModelRegistry

CountCall = WorkCall[TokenizerWork, PromptRequest]


class CountTokensEndpoint(UnaryEndpoint[CountCall]):
    def __init__(self, models: ModelRegistry, messages: MessagesEndpoint) -> None:
        super().__init__(models)
        self.messages = messages

    async def prepare(self, request: PromptRequest, caller: str) -> CountCall:
        return WorkCall(TokenizerWork(model=self.models.get(request.model)), request)

    async def complete(self, call: CountCall) -> body.TokenCount:
        return await self.messages.count_tokens(call.request)
