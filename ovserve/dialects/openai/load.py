"""``POST /v3/models/{name}/load`` as an endpoint of the request envelope: the model loaded now, with
no request to serve (its lease is the load, within ``--request_timeout``); its model object once
loaded. The unload route holds no engine and is not one (``ovserve.api.routes``)."""

from __future__ import annotations

from ovserve.core.engine_work import LoadWork
from ovserve.dialects.endpoint import UnaryEndpoint, WorkCall
from ovserve.dialects.openai.models import Describe, ModelObject
from ovserve.models.served import ModelRegistry

LoadCall = WorkCall[LoadWork, str]


class LoadModelEndpoint(UnaryEndpoint[LoadCall]):
    """``describe`` is the residency manager's view of a model (its ``ovserve`` object)."""

    def __init__(self, models: ModelRegistry, describe: Describe) -> None:
        super().__init__(models)
        self.describe = describe

    async def prepare(self, name: str, caller: str) -> LoadCall:
        model = self.models.get(name)
        model.check_available()
        return WorkCall(LoadWork(model=model), name)

    async def complete(self, call: LoadCall) -> ModelObject:
        return ModelObject.of(call.job.model, self.describe)
