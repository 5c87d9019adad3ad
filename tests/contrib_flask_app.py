"""A Flask app for tests/test_contrib_flask.py, built by a factory around a module-level
extension (``ext.init_app(app)``); ``contrib_flask_worker`` is the module a worker loads."""

from __future__ import annotations

from typing import Any

from flask import Flask, current_app, g

import cogworker
from cogworker.contrib.flask import Cogworker, config

ext = Cogworker()


class GreetJob(cogworker.Job, queue="flask"):
    """Needs the app context: it reads the app's own config through ``current_app``."""

    name = "ContribFlask::Greet"

    def perform(self, marker: str) -> None:
        g.marker = marker  # g exists only inside an app context
        greeting = f"{current_app.config['GREETING']} from {current_app.name} ({g.marker})"
        config().redis().rpush(f"test:greeted:{marker}", greeting)


def create_app(**settings: Any) -> Flask:
    app = Flask("contrib_flask_app")
    app.config["GREETING"] = "hello"
    app.config["COGWORKER"] = {"queues": ["flask"], "concurrency": 3, "tag": "from-app"}
    app.config.update(settings)
    ext.init_app(app)

    @app.post("/greet/<marker>")
    def greet(marker: str) -> dict[str, Any]:
        return {"jid": GreetJob.perform_async(marker)}

    @app.post("/greet-through-client/<marker>")
    def greet_through_client(marker: str) -> dict[str, Any]:
        return {"jid": ext.client.enqueue(GreetJob, marker)}

    return app
