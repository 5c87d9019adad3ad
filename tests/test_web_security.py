"""The dashboard's safety rules: the same-origin check for anything that changes state (and
that it runs before the host's middleware), the override hook, an auth layer added with
``use``, the response headers, escaping of hostile stored strings, redirects that can't
leave the dashboard, and entries that are not readable jobs."""

from __future__ import annotations

import base64
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, ClassVar

import pytest
import redis
import web_support
from starlette.responses import PlainTextResponse
from web_support import (
    BASE,
    SAME_ORIGIN,
    client_for,
    form_with,
    forms,
    get_once,
    make_dash,
    post,
    push,
    submit,
)

import cogworker
from cogworker import keys, wire
from cogworker.web.application import Dashboard
from cogworker.web.security import same_origin

Scope = MutableMapping[str, Any]
ASGIApp = Callable[..., Awaitable[None]]

PAGES = ["/", "/overview?layout=a", "/overview?layout=b", "/workers", "/jobs"]

_dash = pytest.fixture(name="dash")(web_support.dashboard)
_client = pytest.fixture(name="client")(web_support.dashboard_client)


class Recorder:
    """A ``use`` middleware that records every request that reaches it."""

    seen: ClassVar[list[str]] = []

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            Recorder.seen.append(f"{scope['method']} {scope['path']}")
        await self.app(scope, receive, send)


class BasicAuth:
    """A stand-in auth layer: 401 unless the request carries the right Authorization."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Basic {token}".encode()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != (
            self.expected
        ):
            await PlainTextResponse("login needed", status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


# -- the same-origin rule --------------------------------------------------------------------


def test_reads_pass_without_any_origin_header(client: Any) -> None:
    assert client.get("/").status_code == 200
    assert client.head("/workers").status_code == 200
    assert client.options("/workers").status_code != 403


def test_a_post_without_origin_evidence_is_refused_and_changes_nothing(
    client: Any, r: redis.Redis
) -> None:
    push(r, "default")
    answer = client.post("/overview/default/pause", data={"layout": "a"})
    assert answer.status_code == 403
    assert answer.text == "Forbidden"
    assert answer.headers["content-type"].startswith("text/plain")
    assert not r.sismember(keys.PAUSED_QUEUES, "default")


@pytest.mark.parametrize("site", ["cross-site", "same-site", "none"])
def test_sec_fetch_site_other_than_same_origin_is_refused(
    client: Any, r: redis.Redis, site: str
) -> None:
    push(r, "default")
    answer = client.post(
        "/overview/default/pause",
        data={"layout": "a"},
        headers={"sec-fetch-site": site, "origin": BASE},  # the header wins over Origin
    )
    assert answer.status_code == 403
    assert not r.sismember(keys.PAUSED_QUEUES, "default")


def test_sec_fetch_site_same_origin_is_accepted(client: Any, r: redis.Redis) -> None:
    push(r, "default")
    answer = post(client, "/overview/default/pause", {"layout": "a"})
    assert answer.status_code == 303
    assert r.sismember(keys.PAUSED_QUEUES, "default")


@pytest.mark.parametrize(
    ("header", "value", "accepted"),
    [
        ("origin", "http://jobs.internal:9292", True),
        ("origin", "HTTP://Jobs.Internal:9292", True),
        ("referer", "http://jobs.internal:9292/overview?layout=a", True),
        ("origin", "http://evil.example:9292", False),
        ("origin", "http://jobs.internal:9293", False),
        ("origin", "https://jobs.internal:9292", False),
        ("origin", "null", False),
        ("referer", "http://evil.example/page", False),
        ("origin", "not a url", False),
    ],
)
def test_without_sec_fetch_site_the_origin_must_match_the_request(
    dash: Dashboard, r: redis.Redis, header: str, value: str, accepted: bool
) -> None:
    """Plain HTTP on an internal host name: browsers send Origin but no Sec-Fetch-Site."""
    push(r, "default")
    with client_for(dash, base_url="http://jobs.internal:9292") as plain_http:
        answer = plain_http.post(
            "/overview/default/pause", data={"layout": "a"}, headers={header: value}
        )
    assert answer.status_code == (303 if accepted else 403)
    assert bool(r.sismember(keys.PAUSED_QUEUES, "default")) is accepted


def test_default_ports_count_as_the_same_origin(dash: Dashboard, r: redis.Redis) -> None:
    push(r, "default")
    with client_for(dash, base_url="https://jobs.internal") as https:
        answer = https.post(
            "/overview/default/pause",
            data={"layout": "a"},
            headers={"origin": "https://jobs.internal:443"},
        )
    assert answer.status_code == 303


def test_a_refused_request_never_reaches_the_hosts_middleware(
    dash: Dashboard, r: redis.Redis
) -> None:
    push(r, "default")
    Recorder.seen = []
    dash.use(Recorder)
    with client_for(dash) as test_client:
        refused = test_client.post(
            "/overview/default/pause", headers={"sec-fetch-site": "cross-site"}
        )
        assert refused.status_code == 403
        assert Recorder.seen == []
        accepted = post(test_client, "/overview/default/pause", {"layout": "a"})
    assert accepted.status_code == 303
    assert Recorder.seen == ["POST /overview/default/pause"]


def test_the_hook_can_let_a_deliberate_exception_through(dash: Dashboard) -> None:
    dash.safe_request = lambda scope: scope["path"] == "/save_session" or same_origin(scope)
    with client_for(dash) as test_client:
        assert test_client.post("/save_session").text == "OK"
        assert test_client.post("/workers/quiet", data={"identity": "x"}).status_code == 403


# -- auth layer ------------------------------------------------------------------------------


def test_an_auth_layer_added_with_use_guards_every_route_but_the_assets(
    dash: Dashboard, r: redis.Redis
) -> None:
    push(r, "default")
    token = base64.b64encode(b"ops:secret").decode()
    dash.use(BasicAuth, token=token)
    with client_for(dash) as test_client:
        for path in [*PAGES, "/metrics", "/workers/summary", "/overview/redis"]:
            assert test_client.get(path).status_code == 401, path
        assert post(test_client, "/overview/default/pause", {"layout": "a"}).status_code == 401
        assert not r.sismember(keys.PAUSED_QUEUES, "default")
        asset = re.search(r'href="(/assets/app\.css\?v=\w+)"', client_html(dash, token))
        assert asset is not None
        assert test_client.get(asset.group(1)).status_code == 200  # assets hold no data
        authorised = {"authorization": f"Basic {token}"}
        assert test_client.get("/workers", headers=authorised).status_code == 200
        assert test_client.get("/metrics", headers=authorised).status_code == 200


def client_html(dash: Dashboard, token: str) -> str:
    with client_for(dash) as test_client:
        return test_client.get("/", headers={"authorization": f"Basic {token}"}).text


# -- headers ---------------------------------------------------------------------------------


def response_samples(client: Any, r: redis.Redis) -> dict[str, Any]:
    push(r, "default")
    page = client.get("/")
    asset = re.search(r'src="(/assets/app\.js\?v=\w+)"', page.text)
    assert asset is not None
    return {
        "page": page,
        "fragment": client.get("/overview", headers={"hx-request": "true"}),
        "asset": client.get(asset.group(1)),
        "metrics": client.get("/metrics"),
        "forbidden": client.post("/overview/default/pause"),
        "redirect": post(client, "/overview/default/resume", {"layout": "a"}),
        "not found": client.get("/no/such/page"),
        "bad request": client.get("/overview?layout=b&page=zero"),
    }


def test_every_response_carries_the_security_headers(client: Any, r: redis.Redis) -> None:
    for what, answer in response_samples(client, r).items():
        policy = answer.headers.get("content-security-policy", "")
        assert "default-src 'self'" in policy, what
        assert "script-src 'self'" in policy and "style-src 'self'" in policy, what
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy, what
        assert "frame-ancestors 'none'" in policy, what
        assert answer.headers["x-frame-options"] == "DENY", what
        assert answer.headers["x-content-type-options"] == "nosniff", what
        assert answer.headers["referrer-policy"] == "same-origin", what


@pytest.mark.parametrize(
    ("setting", "header", "ancestors"), [("SAMEORIGIN", "SAMEORIGIN", "'self'"), (None, None, None)]
)
def test_framing_can_be_relaxed(
    config: cogworker.Config, setting: str | None, header: str | None, ancestors: str | None
) -> None:
    dashboard = make_dash(config, frame_options=setting)
    answer = get_once(dashboard, "/workers")
    assert answer.headers.get("x-frame-options") == header
    policy = answer.headers["content-security-policy"]
    assert (
        (f"frame-ancestors {ancestors}" in policy)
        if ancestors
        else ("frame-ancestors" not in policy)
    )


def test_pages_need_no_inline_script_style_or_handler_and_load_nothing_from_elsewhere(
    client: Any, r: redis.Redis
) -> None:
    push(r, "default", args=[1])
    for path in PAGES:
        html = client.get(path).text
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), path
        assert not re.search(r"\sstyle=", html), path
        assert not re.search(r"\son[a-z]+=", html), path
        assert "javascript:" not in html and "http://" not in html and "https://" not in html, path


# -- escaping --------------------------------------------------------------------------------

HOSTILE = '<script>alert("x")</script>&\''


def test_hostile_strings_are_never_rendered_raw(client: Any, r: redis.Redis) -> None:
    from web_support import plant_process, plant_work

    push(
        r,
        HOSTILE,
        **{"class": HOSTILE, "jid": HOSTILE, "args": [HOSTILE, {"k": HOSTILE}]},
        error_message=HOSTILE,
        error_class=HOSTILE,
    )
    plant_process(r, f"host:1:{HOSTILE}", queues=[HOSTILE], tag=HOSTILE)
    plant_work(
        r, f"host:1:{HOSTILE}", HOSTILE, {"class": HOSTILE, "jid": HOSTILE, "queue": HOSTILE}, 1
    )
    pages = [
        "/overview?layout=a",
        "/overview?layout=b",
        "/workers",
        "/workers/summary",
        f"/overview/{HOSTILE}/delete_all?queue={HOSTILE}",
    ]
    for path in pages:
        answer = client.get(path.replace("&'", "%26%27").replace("<", "%3C").replace(">", "%3E"))
        assert answer.status_code == 200, path
        assert "<script>alert" not in answer.text, path
        assert "&lt;script&gt;" in answer.text or path == "/workers/summary", path


def test_no_redirect_leaves_the_dashboard(client: Any, r: redis.Redis) -> None:
    """Redirect targets are the mount plus a fixed path; a queue name only travels encoded."""
    evil = "//evil.example/x"
    answer = post(
        client, f"/overview/{evil}/pause", {"queue": evil, "next": "https://evil.example"}
    )
    assert answer.status_code == 303
    location = answer.headers["location"]
    assert location.startswith("/overview?layout=b&queue=%2F%2Fevil.example%2Fx")
    answer = post(client, "/workers/quiet", {"identity": "nobody", "next": "//evil.example"})
    assert answer.headers["location"].startswith("/workers")


# -- entries that are not readable jobs ------------------------------------------------------


def test_corrupt_queue_entries_show_as_unparseable_with_delete_only(
    client: Any, r: redis.Redis, redis_url: str
) -> None:
    push(r, "default", args=["good"])
    raw_bytes = redis.Redis.from_url(redis_url)  # no decoding: writes any bytes
    try:
        raw_bytes.lpush(keys.queue("default"), b'{"class":"X","jid":"\xff\xfe bad"}')
        raw_bytes.lpush(keys.queue("default"), b"\xc3(not json")
    finally:
        raw_bytes.close()
    r.lpush(keys.queue("default"), "{not json", "[1, 2]")
    page = client.get("/overview?layout=b&queue=default")
    assert page.status_code == 200
    assert page.text.count("(unparseable)") >= 3
    row_forms = [f for f in forms(page.text) if f.hx_post and f.hx_post.endswith("/delete")]
    assert len(row_forms) == 5  # one Delete per row, nothing else per row
    for form in row_forms:
        assert submit(client, form, js=True).status_code == 200
    remaining = r.lrange(keys.queue("default"), 0, -1)
    assert remaining == []


def test_an_undecodable_queue_name_still_works_in_every_action(
    client: Any, r: redis.Redis, redis_url: str
) -> None:
    raw_bytes = redis.Redis.from_url(redis_url)
    name = b"q\xff"
    try:
        raw_bytes.sadd(keys.QUEUES, name)
        raw_bytes.lpush(keys.QUEUE_PREFIX.encode() + name, wire.dumps({"class": "X", "jid": "j1"}))
        page = client.get("/overview?layout=a")
        assert page.status_code == 200
        pause = [f for f in forms(page.text) if f.button == "pause"]
        assert len(pause) == 1
        assert submit(client, pause[0], js=False).status_code == 303
        assert raw_bytes.sismember(keys.PAUSED_QUEUES, name)
    finally:
        raw_bytes.close()


def test_a_huge_entry_can_be_deleted(client: Any, r: redis.Redis) -> None:
    raw = push(r, "big", args=["x" * 3_000_000])
    page = client.get("/overview?layout=b&queue=big")
    delete = form_with(page.text, "delete", "/overview/big/delete")
    assert submit(client, delete, js=True).status_code == 200
    assert r.llen(keys.queue("big")) == 0
    assert raw not in page.text[:1000]
    _ = SAME_ORIGIN
