"""FastAPI and plain Starlette apps for tests/test_contrib_fastapi.py; a worker loads this
module (``-r contrib_fastapi_app``) for its job."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import cogworker
from cogworker.contrib.starlette import Lifespan, cogworker_lifespan, get_client

CogworkerClient = Annotated[cogworker.Client, Depends(get_client)]


class WelcomeJob(cogworker.Job, queue="fastapi"):
    name = "ContribFastAPI::Welcome"

    def perform(self, marker: str) -> None:
        cogworker.default_config().redis().rpush(f"test:welcomed:{marker}", f"welcome {marker}")


def fastapi_app(config: cogworker.Config, inner: Lifespan | None = None) -> FastAPI:
    app = FastAPI(lifespan=cogworker_lifespan(config, inner))

    @app.post("/welcome/{marker}")
    def welcome(marker: str, client: CogworkerClient) -> dict[str, Any]:
        return {"jid": client.enqueue(WelcomeJob, marker)}

    @app.get("/state")
    def state(request: Request) -> dict[str, Any]:
        return {"greeting": getattr(request.state, "greeting", None)}

    return app


async def _welcome(request: Request) -> JSONResponse:
    client = get_client(request)
    return JSONResponse({"jid": client.enqueue(WelcomeJob, request.path_params["marker"])})


def starlette_app(config: cogworker.Config) -> Starlette:
    routes = [Route("/welcome/{marker}", _welcome, methods=["POST"])]
    return Starlette(routes=routes, lifespan=cogworker_lifespan(config))
