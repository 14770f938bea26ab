"""Streamlit's static assets served from memory (mha_viz.server.static_assets): the bytes of
Streamlit's own files (from the second request on gzipped for a browser that accepts it, as
Python's gzip reads them back), and every other request (a page, index.html, an unknown, hostile or traversing path,
a HEAD, a range or a revalidation) handed to the app behind unchanged."""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path

import pytest

from mha_viz.server.static_assets import StaticAssets, middleware

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


def test_a_base_url_path(files):
    behind = Behind()
    wrapped = middleware(Path(streamlit.__file__).parent, "/tools/mha/")
    app = wrapped.cls(behind, *wrapped.args, **wrapped.kwargs)
    url = "/" + files[1].relative_to(STATIC).as_posix()
    assert request(app, "/tools/mha" + url)[2] == files[1].read_bytes()
    assert request(app, url)[0] == 299  # outside the base path: not ours
