"""Streamlit's own static assets (its JavaScript, CSS, fonts and icon) and a page's HTML served
from memory, gzipped once: an ASGI middleware the app installs in front of Streamlit's
server (app.py).

Every new visitor's browser fetches about 8 MB in 125 files (plotly.js alone is 4.7 MB), and
Streamlit serves them from disk, uncompressed, through its whole middleware stack: measured
with 8 visitors opening one page at once, a quarter of the server's CPU went to those files.
Here each file is read once, compressed once when a second visitor asks for it (for
browsers that accept gzip, all of them), kept, and answered without Streamlit's stack. Only
the exact files found under Streamlit's static folder when the server starts are answered (a
dictionary lookup: no path from a URL ever reaches the file system), but for those Streamlit
answers "no-cache" (index.html, manifest.json); anything else (a page, an unknown or hostile
path, a HEAD, a range or a revalidation request) goes on to Streamlit as before.

A page's HTML: Streamlit answers every page's path with its index.html from disk, through
its whole stack, 4.4 ms of the server's CPU a request (and 1.1 ms for its icon, where one of
the JavaScript files above costs 0.25 ms; a client asking again and again over new
connections, the idle server's CPU subtracted); from memory 1.4 ms and 0.2 ms.
Its first answer for a path (200, HTML, no cookie set) is kept, the viewport script in it,
and later requests for that exact path are answered from memory. At most MAX_PAGES paths are
kept: a path is the visitor's to choose, and unknown ones get the same HTML.

A page's HTML (Streamlit's index.html, answered by Streamlit) gets one short inline script
at the end of its head that writes the viewport cookie the pages read (ui.output's reporter
writes the same one, measured, once Streamlit has drawn the page) from the window's size,
before Streamlit's own script starts: a new visitor's first run is then laid out for the
screen, instead of drawn once for no screen and again when the reporter has measured (two
runs of the page per new visitor, issue 59). Where the guess misses (a sidebar the visitor
resized) the reporter's measure reruns the page as before; a cookie already written is left
alone.
"""

from __future__ import annotations

import gzip
import mimetypes
import os
import threading
from pathlib import Path
from typing import Awaitable, Callable

# Already compressed formats: gzip would cost CPU for nothing.
_STORED = {".woff", ".woff2", ".png", ".jpg", ".jpeg", ".gif", ".webp", ".ico", ".gz", ".br",
           ".zip", ".mp3", ".mp4", ".webm"}
# Streamlit's own header for its hashed (content-named) assets.
CACHE_CONTROL = b"public, immutable, max-age=31536000"
# Streamlit serves its static folder's files at the base path; these it marks "no-cache"
# (its static routes' _NO_CACHE_PATTERN): they stay Streamlit's to answer
_NO_CACHE_SUFFIXES = (".html",)
_NO_CACHE_NAMES = {"manifest.json"}
MAX_PAGES = 64


class _Asset:
    """One file: its bytes as read and, from its second request on, gzipped (None: not
    worth it). The first visitor after a start gets the bytes as they are: compressing 8 MB
    costs about 0.2 s of CPU, which the first page's figure should not wait for."""

    def __init__(self, path: Path):
        self.path = path
        self.content_type = (mimetypes.guess_type(path.name)[0]
                             or "application/octet-stream")
        if self.content_type.startswith("text/") or self.content_type in (
                "application/javascript", "application/json"):
            self.content_type += "; charset=utf-8"
        self.packs = self.path.suffix.lower() not in _STORED
        self._lock = threading.Lock()
        self._raw: bytes | None = None
        self._gzipped: bytes | None = None

    @property
    def ready(self) -> bool:
        """Whether bodies() has nothing left to read or compress."""
        return self._raw is not None and (self._gzipped is not None or not self.packs)

    def bodies(self) -> tuple[bytes, bytes | None]:
        with self._lock:
            if self._raw is None:
                self._raw = self.path.read_bytes()
                self.packs = self.packs and len(self._raw) > 1024
            elif self.packs and self._gzipped is None:
                packed = gzip.compress(self._raw, compresslevel=6, mtime=0)
                if len(packed) < 0.9 * len(self._raw):
                    self._gzipped = packed
                else:
                    self.packs = False
            return self._raw, self._gzipped


def static_files(folder: Path) -> dict[str, _Asset]:
    """Every file under folder by its URL path below the base ("static/js/x.js",
    "favicon.png"), but for those Streamlit answers "no-cache" (its HTML, its manifest)."""
    found = {}
    root = Path(folder)
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            key = path.relative_to(root).as_posix()
            if not key.lower().endswith(_NO_CACHE_SUFFIXES) and key not in _NO_CACHE_NAMES:
                found[key] = _Asset(path)
    return found


def _accepts_gzip(headers) -> bool:
    for name, value in headers:
        if name == b"accept-encoding":
            return any(part.split(b";")[0].strip() == b"gzip" for part in value.split(b","))
    return False


# The guess of the main column's width, in the reporter's terms (ui/output.py _VIEWPORT_JS:
# the main block's inner width, the window's height in presentation mode only, each floored
# to 20 px), from Streamlit's layout (1.67, layout="wide") and the app's CSS as measured in
# chromium at 360-1920 px windows: the sidebar (300 px) open beside the page on windows wider
# than 768 px, closed in presentation mode; the page's sides 16 px each, 80 px from a window
# of 864 px on (measured: 16 at 861, 80 at 866), 50 px in presentation mode (its CSS).
# Presentation mode is ignored on a window narrower than 640 px (ui.state.presenting).
# tests/browser/test_first_run_fitted.py checks the guess against the reporter's measure.
VIEWPORT_COOKIE = "mha_viz_viewport"
_VIEWPORT_GUESS = f"""<script>(function () {{
  try {{
    if (document.cookie.split('; ').some(c => c.startsWith('{VIEWPORT_COOKIE}='))) return;
    const w = window.innerWidth, h = window.innerHeight;
    const asked = (new URLSearchParams(location.search).get('present') || '').toLowerCase();
    const present = w >= 640 && ['1', 'true', 'yes', 'on'].includes(asked);
    const sidebar = !present && w > 768 ? 300 : 0;
    const sides = present ? 50 : (w >= 864 ? 80 : 16);
    const floor = v => Math.floor(v / 20) * 20;
    document.cookie = '{VIEWPORT_COOKIE}=' + floor(w - sidebar - 2 * sides) + 'x'
        + (present ? floor(h) : 0) + 'x' + floor(w) + '; path=/; max-age=2592000; SameSite=Strict';
  }} catch (e) {{}}
}})();</script>""".encode()


def with_viewport_guess(html: bytes) -> bytes | None:
    """The page's HTML with the viewport script last in its head (None: no </head>): after
    the viewport meta tag, before which a phone's window is 980 px wide; Streamlit's own
    scripts are modules, run after the page is parsed."""
    at = html.lower().rfind(b"</head>")
    if at < 0:
        return None
    return html[:at] + _VIEWPORT_GUESS + html[at:]


def _may_be_a_page(path: str) -> bool:
    """A path Streamlit may answer with index.html: no file name with a dot in its last part
    (pages are /, /Attention_Maps, ...), not Streamlit's own API."""
    last = path.rstrip("/").rsplit("/", 1)[-1]
    return "/_stcore/" not in path + "/" and ("." not in last or last == "index.html")


def _guessing_viewport(send, remember=None):
    """send, with a 200 text/html response's body (whole) given the viewport script; every
    other response passes as it is. remember(headers, body): told the page's answer."""
    start: dict | None = None
    parts: list[bytes] = []

    async def wrapped(message: dict) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers", ()))
            if (message.get("status") == 200 and b"content-encoding" not in headers
                    and headers.get(b"content-type", b"").startswith(b"text/html")):
                start = message
                return
        elif message["type"] == "http.response.body" and start is not None:
            parts.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(parts)
            body = with_viewport_guess(body) or body
            headers = [(name, value) for name, value in start.get("headers", ())
                       if name not in (b"content-length", b"etag", b"last-modified")]
            headers.append((b"content-length", str(len(body)).encode()))
            if remember is not None:
                remember(headers, body)
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await send(message)

    return wrapped


def _defers_to_streamlit(headers) -> bool:
    """Range and revalidation requests: Streamlit's own handler answers them."""
    return any(name in (b"range", b"if-none-match", b"if-modified-since")
               for name, _ in headers)


class StaticAssets:
    """ASGI middleware: GET base/static/... answered from memory (the module's docstring)."""

    def __init__(self, app, folder: str | Path, base_url: str = ""):
        self.app = app
        base = "/".join(part for part in str(base_url or "").split("/") if part)
        self.prefix = f"/{base}/" if base else "/"
        self.assets = static_files(Path(folder))
        self.pages: dict[str, tuple[list, bytes]] = {}  # path -> a page's answer, as kept

    async def __call__(self, scope, receive: Callable[[], Awaitable[dict]],
                       send: Callable[[dict], Awaitable[None]]) -> None:
        asset = self._asset_for(scope)
        if asset is None:
            path = scope.get("path", "")
            if (scope.get("type") == "http" and scope.get("method") == "GET"
                    and _may_be_a_page(path)):
                conditional = _defers_to_streamlit(scope.get("headers", ()))
                kept = None if conditional else self.pages.get(path)
                if kept is not None:
                    await send({"type": "http.response.start", "status": 200,
                                "headers": kept[0]})
                    await send({"type": "http.response.body", "body": kept[1]})
                    return
                # the page's HTML as it is (a few kB): the script goes into plain bytes
                scope = {**scope, "headers": [(name, value) for name, value in scope["headers"]
                                              if name != b"accept-encoding"]}
                send = _guessing_viewport(
                    send, None if conditional else lambda h, b: self._keep_page(path, h, b))
            await self.app(scope, receive, send)
            return
        if asset.ready:  # from the second visit on: no thread, no file
            raw, gzipped = asset.bodies()
        else:  # read, then compressed, once each, off the event loop
            import anyio.to_thread

            raw, gzipped = await anyio.to_thread.run_sync(asset.bodies)
        packed = gzipped is not None and _accepts_gzip(scope["headers"])
        body = gzipped if packed else raw
        headers = [(b"content-type", asset.content_type.encode()),
                   (b"content-length", str(len(body)).encode()),
                   (b"cache-control", CACHE_CONTROL), (b"vary", b"Accept-Encoding")]
        if packed:
            headers.append((b"content-encoding", b"gzip"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _keep_page(self, path: str, headers: list, body: bytes) -> None:
        """A page's answer (200, HTML), kept for its path unless it sets a cookie (that one
        would be the visitor's own) or MAX_PAGES paths are kept already."""
        if len(self.pages) < MAX_PAGES and all(name.lower() != b"set-cookie"
                                               for name, _ in headers):
            self.pages[path] = (headers, body)

    def _asset_for(self, scope) -> _Asset | None:
        if scope.get("type") != "http" or scope.get("method") != "GET":
            return None
        path = scope.get("path", "")
        if not path.startswith(self.prefix):
            return None
        if _defers_to_streamlit(scope.get("headers", ())):
            return None
        return self.assets.get(path[len(self.prefix):])


def middleware(streamlit_folder: str | Path, base_url: str = ""):
    """StaticAssets for the Streamlit installed at streamlit_folder (its package's folder),
    served under base_url (server.baseUrlPath), as st.App's middleware list takes it."""
    from starlette.middleware import Middleware

    return Middleware(StaticAssets, folder=Path(streamlit_folder) / "static", base_url=base_url)
