"""The extension API: an extension adds routes (a path segment and a query parameter read, a
form posted, a page drawn in the dashboard's shell) and a tab in the header; the built-in tabs
and ``/metrics`` are registered the same way; bad registrations are refused with one line."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount
from web_support import HX, SAME_ORIGIN, client_for, make_dash, post

import cogworker
from cogworker import keys
from cogworker.web import urls
from cogworker.web.application import Dashboard
from cogworker.web.extensions import Action, Routes

HOSTILE = "<script>alert(1)</script>"


class Reports:
    """A small extension: a page per report (path segment) with a query parameter, a form
    that posts, and a redirect."""

    def registered(self, routes: Routes) -> None:
        @routes.get("/reports")
        def index(action: Action) -> Response:
            size = action.redis().llen(keys.queue("default"))
            return action.page(
                "Reports",
                "<h1>Reports</h1><p>{{ size }} waiting</p>"
                '<a href="{{ url("reports/daily", q="x") }}">daily</a>'
                '<form method="post" action="{{ url("reports/note") }}"><input name="text"></form>',
                size=size,
            )

        @routes.get("/reports/{name}")
        def report(action: Action) -> str:
            return f"report={action.params['name']} q={action.param('q')}"

        @routes.get("/sinatra/:name/:part")
        def sinatra(action: Action) -> str:
            return f"{action.params['name']}/{action.params['part']}"

        @routes.post("/reports/note")
        def note(action: Action) -> Response:
            action.redis().set("test:note", action.param("text") or "")
            return action.redirect("reports", saved="1")

        @routes.get("/reports-render")
        def rendered(action: Action) -> str:
            return str(action.render("<b>{{ who }}</b> {{ n * 2 }}", who=action.param("who"), n=21))


@pytest.fixture
def dash(config: cogworker.Config) -> Iterator[Dashboard]:
    dashboard = make_dash(config)
    dashboard.register(Reports(), name="reports", tab="Reports", index="reports")
    try:
        yield dashboard
    finally:
        dashboard.close()


@pytest.fixture
def client(dash: Dashboard) -> Iterator[Any]:
    with client_for(dash) as test_client:
        yield test_client


def nav_of(html: str) -> list[tuple[str, str]]:
    nav = html.split('<nav class="cw-tabs" aria-label="Tabs">')[1].split("</nav>")[0]
    return re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', nav)


# -- routes ----------------------------------------------------------------------------------


def test_a_route_reads_a_path_segment_and_a_query_parameter(client: Any) -> None:
    answer = client.get("/reports/weekly", params={"q": "blue"})
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    assert answer.text == "report=weekly q=blue"
    assert client.get("/reports/a%20b%C3%A9").text == "report=a bé q=None"  # decoded
    assert client.get("/reports/weekly?name=other").text == "report=weekly q=None"  # path wins


def test_sinatra_style_segments_work_too(client: Any) -> None:
    assert client.get("/sinatra/one/two").text == "one/two"
    assert client.get("/sinatra/one").status_code == 404


def test_render_takes_a_template_string_and_escapes(client: Any) -> None:
    answer = client.get("/reports-render", params={"who": HOSTILE})
    assert answer.text == "<b>&lt;script&gt;alert(1)&lt;/script&gt;</b> 42"


def test_a_post_route_reads_the_form_and_redirects_under_the_mount(
    client: Any, r: redis.Redis
) -> None:
    answer = post(client, "/reports/note", {"text": "hello"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/reports?saved=1"
    assert r.get("test:note") == "hello"
    refused = client.post(
        "/reports/note", data={"text": "x"}, headers={"sec-fetch-site": "cross-site"}
    )
    assert refused.status_code == 403
    assert r.get("test:note") == "hello"


def test_a_bad_parameter_is_a_400_and_a_bad_answer_an_error(dash: Dashboard) -> None:
    def extension(routes: Routes) -> None:
        @routes.get("/strict")
        def strict(action: Action) -> str:
            raise urls.BadParameter("n must be a number (got 'x')")

        @routes.get("/wrong")
        def wrong(action: Action) -> str:
            return 42  # type: ignore[return-value]

    dash.register(extension, name="strict")
    with client_for(dash) as test_client:
        answer = test_client.get("/strict")
        assert (answer.status_code, answer.text) == (
            400,
            "Bad request: n must be a number (got 'x')",
        )
        with pytest.raises(TypeError, match="must return a str or a Response, got int"):
            test_client.get("/wrong")


def test_a_later_registration_of_the_same_route_wins(dash: Dashboard) -> None:
    def newer(routes: Routes) -> None:
        routes.add("GET", "/reports/{name}", lambda action: "newer")

    dash.register(newer, name="newer")
    with client_for(dash) as test_client:
        assert test_client.get("/reports/x").text == "newer"


def test_extension_routes_sit_behind_the_middleware_added_with_use(dash: Dashboard) -> None:
    class Gate:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"].startswith("/reports"):
                await PlainTextResponse("no", status_code=401)(scope, receive, send)
                return
            await self.app(scope, receive, send)

    dash.use(Gate)
    with client_for(dash) as test_client:
        assert test_client.get("/reports/x").status_code == 401
        assert test_client.get("/overview").status_code == 200


# -- the tab ---------------------------------------------------------------------------------


def test_the_tab_shows_after_the_built_in_ones_and_is_marked_on_its_page(client: Any) -> None:
    html = client.get("/reports").text
    assert nav_of(html) == [
        ("/overview", "Overview"),
        ("/jobs", "Jobs"),
        ("/schedules", "Schedules"),
        ("/workers", "Workers"),
        ("/history", "History"),
        ("/class_metrics", "Metrics"),
        ("/reports", "Reports"),
    ]
    assert '<a href="/reports" aria-current="page">Reports</a>' in html
    assert "<title>Reports · Cogworker</title>" in html
    assert "<h1>Reports</h1><p>0 waiting</p>" in html
    assert 'id="cluster-bar"' in html  # the dashboard's own header and shell
    fragment = client.get("/reports", headers=HX).text
    assert fragment.startswith("<h1>Reports</h1>") and "<html" not in fragment


def test_tabs_can_be_changed_directly(dash: Dashboard, client: Any) -> None:
    dash.tabs["Docs"] = "reports/docs"
    del dash.tabs["Jobs"]
    labels = [label for _, label in nav_of(client.get("/overview").text)]
    assert labels == ["Overview", "Schedules", "Workers", "History", "Metrics", "Reports", "Docs"]


def test_under_a_prefix_every_link_of_the_extension_follows_it(dash: Dashboard) -> None:
    host = Starlette(routes=[Mount("/ops", dash)])
    with client_for(host) as test_client:
        html = test_client.get("/ops/reports").text
        assert ("/ops/reports", "Reports") in nav_of(html)
        assert 'href="/ops/reports/daily?q=x"' in html
        assert 'action="/ops/reports/note"' in html
        assert post(test_client, "/ops/reports/note", {"text": "x"}).headers["location"] == (
            "/ops/reports?saved=1"
        )


# -- one mechanism ---------------------------------------------------------------------------


def test_built_in_tabs_and_metrics_are_registrations_too(dash: Dashboard, client: Any) -> None:
    assert dash.extensions == (
        "overview",
        "jobs",
        "schedules",
        "workers",
        "history",
        "class_metrics",
        "prometheus_exporter",
        "save_session",
        "reports",
    )
    assert "# TYPE cogworker_processed_total counter" in client.get("/metrics").text

    def replaced(routes: Routes) -> None:
        routes.add("GET", "/metrics", lambda action: PlainTextResponse("mine"))

    dash.register(replaced, name="my_metrics")
    with client_for(dash) as test_client:
        assert test_client.get("/metrics").text == "mine"


def test_register_returns_the_name(config: cogworker.Config) -> None:
    dashboard = make_dash(config)
    assert dashboard.register(lambda routes: None, name="quiet") == "quiet"
    assert "quiet" not in dashboard.tabs


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda d: d.register(Reports(), name="x", tab="X"),
            ValueError,
            "tab and index go together",
        ),
        (
            lambda d: d.register(Reports(), name="x", tab="X", index="/x"),
            ValueError,
            "without the leading /",
        ),
        (lambda d: d.register(Reports(), name=""), ValueError, "needs a non-empty name"),
        (lambda d: d.register(object(), name="x"), TypeError, "expected an object with registered"),
        (
            lambda d: d.register(lambda r: r.add("GET", "x", str), name="x"),
            ValueError,
            "must start with /",
        ),
        (
            lambda d: d.register(lambda r: r.add("GET", "/assets/x", str), name="x"),
            ValueError,
            "under /assets/",
        ),
        (
            lambda d: d.register(lambda r: r.add("PUT", "/x", str), name="x"),
            ValueError,
            "GET or POST",
        ),
    ],
)
def test_a_bad_registration_is_refused_in_one_line(
    config: cogworker.Config, call: Any, error: type[Exception], message: str
) -> None:
    dashboard = make_dash(config)
    with pytest.raises(error, match=re.escape(message)) as refused:
        call(dashboard)
    assert "\n" not in str(refused.value)
    assert dashboard.extensions[-1] == "save_session"  # nothing half-registered


def test_an_async_handler_is_refused(config: cogworker.Config) -> None:
    async def handler(action: Action) -> str:
        return ""

    with pytest.raises(TypeError, match="must be a plain function taking an Action"):
        make_dash(config).register(lambda r: r.add("GET", "/a", handler), name="a")  # type: ignore[arg-type]


def test_extension_pages_need_no_script_of_their_own(client: Any) -> None:
    answer = client.get("/reports", headers=SAME_ORIGIN)
    assert "content-security-policy" in answer.headers
    assert "<script>" not in answer.text
