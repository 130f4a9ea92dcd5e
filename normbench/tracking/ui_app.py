"""The app `normbench ui` serves: MLflow's, plus one script on its page. MLflow's UI takes group colours only from
localStorage (`experimentRunColors`, what its colour picker writes), else hashes the group id; the script merges in
each row's view colour (view_state.py) and keeps MLflow's assistant panel (a third of the width) from opening on a
first visit. MLflow prints a metric with every digit it has (`98.33333333333333 (average)`); the store keeps them
(a mean computed from it is the leaderboard's), and the table rounds where it prints, as the leaderboard does:
ROUND_SCRIPT shows a metric cell's value of 1 or more with 2 decimals, a smaller one with 3 significant digits.
LEGEND_STYLE lets a chart's legend list every row (MLflow's is a two-line scroll box). Both checked in a real browser
by scripts/ui-screenshots.sh (docs/mlflow-table.png, docs/mlflow-charts.png).

The runs table asks for 100 runs a page and averages each group over the runs it has loaded, so a view matching more
(the modern folder's report runs: 120) showed groups averaged over part of their seeds, and some not at all: the app
raises each runs search's `max_results` to RUNS_PAGE, so a group is every run of its row.
"""

from __future__ import annotations

import json
import os
from typing import Any

from mlflow.server.fastapi_app import app as mlflow_app

from normbench.tracking.ui import COLOURS_ENV, COLOURS_FILE_ENV

STORAGE_KEY = "experimentRunColors"  # MLflow UI's localStorage entry of run and group colours
ASSISTANT_SEEN = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"  # set: MLflow's UI does not open its assistant
RUNS_SEARCH = "/mlflow/runs/search"  # ajax-api/2.0/mlflow/runs/search: the runs table's query (POST, JSON)
RUNS_PAGE = 10_000  # runs a search returns at once (MLflow's server takes up to 50,000; its UI asks for 100)


# every text node in the runs table's metric cells (`col-id` metrics.`name`) that is a number with 3 decimals or more,
# rounded as it is added or changed (the grid draws rows as they scroll into view)
ROUND_SCRIPT = ("(function(){var r=/^(\\s*)(-?\\d+\\.\\d{3,})(\\s*)$/;"
                "function f(n){if(!n)return;var w=document.createTreeWalker(n,4),t;while((t=w.nextNode())){"
                "var m=r.exec(t.nodeValue),e=t.parentElement;"
                "if(!m||!e||!e.closest('.ag-cell[col-id^=\"metrics.\"]'))continue;var v=parseFloat(m[2]);"
                "var s=Math.abs(v)>=1?v.toFixed(2):String(Number(v.toPrecision(3)));"
                "if(s!==m[2])t.nodeValue=m[1]+s+m[3]}}"
                "new MutationObserver(function(l){l.forEach(function(m){"
                "if(m.type==='characterData')f(m.target.parentNode);"
                "else m.addedNodes.forEach(function(n){f(n.nodeType===3?n.parentNode:n)})})})"
                ".observe(document.documentElement,{childList:true,subtree:true,characterData:true})})();")


# A chart card's legend is a 32 px scroll box (MLflow 3.17: two lines, two groups of 19 in a half-width card): the
# card becomes a column whose legend takes its lines' height, up to 40% of it, and whose plot takes the rest
_CARD = '[data-testid="experiment-view-compare-runs-card"]'
_ITEM = 'div > svg > path[d$="h24"]'  # a legend item: a 24 px line sample beside its label (`:has` does not nest)
LEGEND_STYLE = (f"<style>{_CARD} div:has(> div > {_ITEM}){{display:flex;flex-direction:column}}"
                f"{_CARD} div:has(+ div > {_ITEM}){{flex:1 1 0;min-height:0;height:auto!important}}"
                f"{_CARD} div:has(> {_ITEM}){{flex:0 0 auto;height:auto!important;max-height:40%}}</style>")


def colour_script(colours: dict[str, str]) -> bytes:
    data = json.dumps(colours).replace("<", "\\u003c")  # no `</script>` can end it early
    return (f"<script>(function(){{var k={json.dumps(STORAGE_KEY)},a={json.dumps(ASSISTANT_SEEN)},c={{}};"
            f"try{{c=JSON.parse(localStorage.getItem(k)||'{{}}')}}catch(e){{}}Object.assign(c,{data});"
            "localStorage.setItem(k,JSON.stringify(c));"
            f"if(localStorage.getItem(a)===null)localStorage.setItem(a,'true')}})();{ROUND_SCRIPT}</script>"
            f"{LEGEND_STYLE}").encode()


def group_colours() -> dict[str, str]:
    """The colours `normbench ui` gave: in its file (written once the view is prepared), else as JSON in the env."""
    if path := os.environ.get(COLOURS_FILE_ENV):
        try:
            with open(path) as file:
                return json.load(file)
        except (OSError, ValueError):  # `normbench ui` has gone (its file with it) or is writing it
            return {}
    return json.loads(os.environ.get(COLOURS_ENV) or "{}")


async def whole_pages(scope: dict[str, Any], receive: Any) -> tuple[dict[str, Any], Any]:
    """A runs search's scope and request with `max_results` raised to RUNS_PAGE (a body that is not a JSON object
    passes as it came: MLflow answers it)."""
    body = bytearray()
    while True:
        message = await receive()
        body.extend(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body"):
            break
    try:
        query = json.loads(body)
    except ValueError:
        query = None
    if isinstance(query, dict) and int(query.get("max_results") or 0) < RUNS_PAGE:
        body = bytearray(json.dumps({**query, "max_results": RUNS_PAGE}).encode())
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
    sent = False

    async def request() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()  # the disconnect, when it comes
        sent = True
        return {"type": "http.request", "body": bytes(body), "more_body": False}

    return {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}, request


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope.get("method") == "POST" and scope.get("path", "").endswith(RUNS_SEARCH):
        scope, receive = await whole_pages(scope, receive)
        await mlflow_app(scope, receive, send)
        return
    colours = group_colours()
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
