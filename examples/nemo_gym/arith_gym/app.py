"""A NeMo-Gym (0.4) resources server written against its public API, for ``task.name:
nemo_gym`` (docs/extending.md, Environments of other libraries): two-digit additions posed
as the quickstart's arithmetic family poses them, with an ``add`` tool for the rows that
offer it. ``/verify`` scores the last reply by two reward components, ``correct`` (1.0 when
its ``<answer>`` is the row's ``expected_answer``) and ``format`` (0.1 for an ``<answer>``
tag); ``reward`` is their sum. Its rows: ``data/`` (written by ``make_data.py``)."""

import re

from fastapi import FastAPI
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from pydantic import BaseModel

ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")


class ArithConfig(BaseResourcesServerConfig):
    pass


class AddRequest(BaseModel):
    a: int
    b: int


class AddResponse(BaseModel):
    sum: int


class ArithVerifyRequest(BaseVerifyRequest):
    expected_answer: str


class ArithVerifyResponse(BaseVerifyResponse):
    reward_components: dict[str, float]


def last_reply(request: BaseVerifyRequest) -> str:
    for item in reversed(request.response.output):
        if item.type == "message" and item.role == "assistant":
            return "".join(part.text for part in item.content if part.type == "output_text")
    return ""


class ArithResourcesServer(SimpleResourcesServer):
    config: ArithConfig

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/add")(self.add)
        return app

    async def add(self, body: AddRequest) -> AddResponse:
        return AddResponse(sum=body.a + body.b)

    async def verify(self, body: ArithVerifyRequest) -> ArithVerifyResponse:
        found = ANSWER.search(last_reply(body))
        parts = {"correct": float(found is not None and found.group(1) == body.expected_answer),
                 "format": 0.1 * (found is not None)}
        return ArithVerifyResponse(**body.model_dump(), reward=sum(parts.values()),
                                   reward_components=parts)


if __name__ == "__main__":
    ArithResourcesServer.run_webserver()
