"""Streamlit's static assets served from memory (mha_viz.server.static_assets): the bytes of
Streamlit's own files (from the second request on gzipped for a browser that accepts it, as
Python's gzip reads them back), and every other request (a page, index.html, an unknown,
hostile or traversing path, a HEAD, a range or a revalidation) handed to the app behind; a
page's HTML comes back with the viewport script in its head, every other answer unchanged, and
is answered from memory the next time its path is asked."""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path

import pytest

from mha_viz.server.static_assets import MAX_PAGES, StaticAssets, middleware

pytestmark = pytest.mark.unit
streamlit = pytest.importorskip("streamlit")
STATIC = Path(streamlit.__file__).parent / "static"


class Behind:
    """The app behind the middleware: records what reached it."""

    def __init__(self):
        self.paths = []

    async def __call__(self, scope, receive, send):
        self.paths.append(scope["path"])
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"behind"})


def request(app, path, method="GET", headers=()):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": list(headers),
             "query_string": b"", "root_path": ""}
    asyncio.run(app(scope, receive, send))
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], dict(start["headers"]), body


@pytest.fixture(scope="module")
def files():
    """A few of Streamlit's real files: its largest JavaScript, a stylesheet, a font."""
    js = max((STATIC / "static" / "js").glob("*.js"), key=lambda p: p.stat().st_size)
    css = next((STATIC / "static" / "css").glob("*.css"))
    font = next((STATIC / "static" / "media").glob("*.woff2"))
    return js, css, font


def test_streamlit_files_come_from_memory_gzipped_when_accepted(files):
    behind = Behind()
    app = StaticAssets(behind, STATIC)
    for path in files:
        url = "/" + path.relative_to(STATIC).as_posix()
        on_disk = path.read_bytes()
        for visit in range(3):  # read on the first request, packed on the second, then kept
            status, headers, body = request(app, url, headers=[(b"accept-encoding",
                                                                b"gzip, deflate, br")])
            assert status == 200
            if path.suffix == ".woff2" or visit == 0:  # a font is compressed already
                assert b"content-encoding" not in headers and body == on_disk
            else:
                assert headers[b"content-encoding"] == b"gzip"
                assert gzip.decompress(body) == on_disk and len(body) < len(on_disk) / 2
            assert int(headers[b"content-length"]) == len(body)
            assert headers[b"cache-control"] == b"public, immutable, max-age=31536000"
        status, headers, body = request(app, url)  # no Accept-Encoding: the bytes as they are
        assert status == 200 and body == on_disk and b"content-encoding" not in headers
    content_types = {p.suffix: request(app, "/" + p.relative_to(STATIC).as_posix())[1][
        b"content-type"] for p in files}
    assert content_types[".js"].split(b";")[0] in (b"text/javascript", b"application/javascript")
    assert content_types[".css"].startswith(b"text/css")
    assert content_types[".woff2"] == b"font/woff2"
    assert behind.paths == []


def test_everything_else_goes_to_streamlit(files):
    behind = Behind()
    app = StaticAssets(behind, STATIC)
    js = "/" + files[0].relative_to(STATIC).as_posix()
    passed = ["/", "/Attention_Maps", "/index.html", "/static/js/nothing-here.js",
              "/static/../index.html", "/static/js/../../index.html", "/static//etc/passwd",
              "/static/js", "/static/", "/_stcore/health", js + "/", js.upper()]
    for path in passed:
        assert request(app, path) == (299, {}, b"behind"), path
    assert request(app, js, method="HEAD")[0] == 299
    assert request(app, js, method="POST")[0] == 299
    for header in (b"range", b"if-none-match", b"if-modified-since"):
        assert request(app, js, headers=[(header, b"x")])[0] == 299
    assert behind.paths == passed + [js] * 5


def test_the_icon_comes_from_memory_and_the_no_cache_files_from_streamlit():
    """Files at the static folder's top: its icon is an asset like the others; index.html and
    manifest.json, which Streamlit answers "no-cache", stay Streamlit's."""
    behind = Behind()
    app = StaticAssets(behind, STATIC)
    status, headers, body = request(app, "/favicon.png")
    assert status == 200 and body == (STATIC / "favicon.png").read_bytes()
    assert headers[b"content-type"] == b"image/png"
    for path in ("/index.html", "/manifest.json"):
        assert request(app, path)[0] == 299, path
    assert behind.paths == ["/index.html", "/manifest.json"]


def test_a_base_url_path(files):
    behind = Behind()
    wrapped = middleware(Path(streamlit.__file__).parent, "/tools/mha/")
    app = wrapped.cls(behind, *wrapped.args, **wrapped.kwargs)
    url = "/" + files[1].relative_to(STATIC).as_posix()
    assert request(app, "/tools/mha" + url)[2] == files[1].read_bytes()
    assert request(app, url)[0] == 299  # outside the base path: not ours


class PageBehind:
    """The app behind answering like Streamlit's index.html: HTML in two body parts, with
    its validators; records the request headers that reached it."""

    def __init__(self, status=200, content_type=b"text/html; charset=utf-8", extra=()):
        self.status, self.content_type, self.extra = status, content_type, list(extra)
        self.headers = []

    async def __call__(self, scope, receive, send):
        self.headers.append(dict(scope["headers"]))
        html = (STATIC / "index.html").read_bytes()
        await send({"type": "http.response.start", "status": self.status, "headers": [
            (b"content-type", self.content_type), (b"content-length", str(len(html)).encode()),
            (b"etag", b'"abc"'), (b"last-modified", b"Sat, 28 Nov 2026 00:00:00 GMT"),
            *self.extra]})
        half = len(html) // 2
        await send({"type": "http.response.body", "body": html[:half], "more_body": True})
        await send({"type": "http.response.body", "body": html[half:]})


def test_a_page_s_html_writes_the_viewport_cookie_first():
    """Streamlit's own index.html, answered for a page's path, comes back whole with the
    viewport script as the last thing in its head, its length told again, its validators
    (those of the file without the script) dropped, and asked of Streamlit uncompressed."""
    on_disk = (STATIC / "index.html").read_bytes()
    for path in ("/", "/Attention_Maps", "/index.html"):
        behind = PageBehind()
        status, headers, body = request(StaticAssets(behind, STATIC), path,
                                        headers=[(b"accept-encoding", b"gzip")])
        assert status == 200
        head_end = body.index(b"</head>")
        script = body.rindex(b"<script>", 0, head_end)
        assert body[script:head_end].endswith(b"</script>") and b"mha_viz_viewport=" in body
        assert body.index(b'name="viewport"') < script  # a phone's width is known by then
        assert body[:script] + body[head_end:] == on_disk
        assert int(headers[b"content-length"]) == len(body)
        assert b"etag" not in headers and b"last-modified" not in headers
        assert b"accept-encoding" not in behind.headers[0]


@pytest.mark.parametrize("case", ["not modified", "json", "compressed", "stcore", "a file"])
def test_other_responses_pass_unchanged(case):
    behind = PageBehind(status=304 if case == "not modified" else 200,
                        content_type=b"application/json" if case == "json" else b"text/html",
                        extra=[(b"content-encoding", b"gzip")] if case == "compressed" else ())
    path = {"stcore": "/_stcore/host-config", "a file": "/manifest.json"}.get(case, "/")
    status, headers, body = request(StaticAssets(behind, STATIC), path,
                                    headers=[(b"accept-encoding", b"gzip")])
    assert body == (STATIC / "index.html").read_bytes()
    assert headers[b"etag"] == b'"abc"'
    if case in ("stcore", "a file"):  # not a page: asked of Streamlit as the browser asked
        assert behind.headers[0][b"accept-encoding"] == b"gzip"


class CountingPageBehind(PageBehind):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.paths = []

    async def __call__(self, scope, receive, send):
        self.paths.append(scope["path"])
        await super().__call__(scope, receive, send)


def test_a_page_s_html_is_answered_from_memory_the_second_time():
    """The first answer for a page's path reaches Streamlit; the next requests of that exact
    path get the same status, headers and bytes from memory. Another path, a revalidation, an
    answer that sets a cookie or is not a 200 are not kept; at most MAX_PAGES paths are."""
    behind = CountingPageBehind()
    app = StaticAssets(behind, STATIC)
    first = request(app, "/Attention_Maps")
    assert first[0] == 200 and b"mha_viz_viewport=" in first[2]
    for _ in range(3):
        assert request(app, "/Attention_Maps", headers=[(b"accept-encoding", b"gzip")]) == first
    assert behind.paths == ["/Attention_Maps"]
    assert request(app, "/Entropy") == first  # the same HTML, asked of Streamlit once
    assert request(app, "/Attention_Maps", headers=[(b"if-none-match", b'"abc"')])[0] == 200
    assert behind.paths == ["/Attention_Maps", "/Entropy", "/Attention_Maps"]
    assert request(app, "/Attention_Maps", method="HEAD")[0] == 200  # not a GET: Streamlit's
    assert len(behind.paths) == 4

    for answer in (dict(extra=[(b"set-cookie", b"mine=1")]), dict(status=404)):
        behind = CountingPageBehind(**answer)
        app = StaticAssets(behind, STATIC)
        request(app, "/")
        request(app, "/")
        assert behind.paths == ["/", "/"], answer

    behind = CountingPageBehind()
    app = StaticAssets(behind, STATIC)
    paths = [f"/page_{i}" for i in range(MAX_PAGES + 5)]
    for path in paths * 2:
        request(app, path)
    assert len(app.pages) == MAX_PAGES
    assert behind.paths == paths + paths[MAX_PAGES:]
