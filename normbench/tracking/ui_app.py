"""The app `normbench ui` serves: MLflow's, plus one script on its page. MLflow's UI takes group colours only from
localStorage (`experimentRunColors`, what its colour picker writes), else hashes the group id; the script merges in
each layer's leaderboard colour and keeps MLflow's assistant panel (a third of the width) from opening on a first visit.
"""

from __future__ import annotations

import json
import os
from typing import Any

from mlflow.server.fastapi_app import app as mlflow_app

from normbench.tracking.ui import COLOURS_ENV

STORAGE_KEY = "experimentRunColors"  # MLflow UI's localStorage entry of run and group colours
ASSISTANT_SEEN = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"  # set: MLflow's UI does not open its assistant


def colour_script(colours: dict[str, str]) -> bytes:
    data = json.dumps(colours).replace("<", "\\u003c")  # no `</script>` can end it early
    return (f"<script>(function(){{var k={json.dumps(STORAGE_KEY)},a={json.dumps(ASSISTANT_SEEN)},c={{}};"
            f"try{{c=JSON.parse(localStorage.getItem(k)||'{{}}')}}catch(e){{}}Object.assign(c,{data});"
            "localStorage.setItem(k,JSON.stringify(c));"
            "if(localStorage.getItem(a)===null)localStorage.setItem(a,'true')})()</script>").encode()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    colours = json.loads(os.environ.get(COLOURS_ENV) or "{}")
    if scope["type"] != "http" or scope.get("path") not in ("/", "/index.html") or not colours:
        await mlflow_app(scope, receive, send)
        return
    start: dict[str, Any] = {}
    body = bytearray()

    async def page(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            return
        body.extend(message.get("body", b""))
        if message.get("more_body"):
            return
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        html = dict(headers).get(b"content-type", b"").startswith(b"text/html")
        out = bytes(body).replace(b"<head>", b"<head>" + colour_script(colours), 1) if html else bytes(body)
        await send({**start, "headers": [*headers, (b"content-length", str(len(out)).encode())]})
        await send({"type": "http.response.body", "body": out})

    await mlflow_app(scope, receive, page)
