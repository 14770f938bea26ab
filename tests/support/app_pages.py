"""The pages in Streamlit's AppTest: one run of a page from a link's query parameters
(run_page), and what it shows (texts, charts, a Plotly array)."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
TIMEOUT = 180  # the first run loads a model


# The sections the pages fold until a reader opens them (ui.drawn_when_opened), that the tests
# were written to see drawn. Inside one head's flash, gradients and cost sections were folded
# from the start and stay folded.
OPENED = ",".join(["aggregates", "token_pair", "distance", "query_entropy", "class_mass",
                   "nearest", "role_maps", "role_head", "qkv", "qknorm", "rope", "scores",
                   "softcap", "bias", "mask", "softmax", "context", "output"])


def run_page(page: str, params: dict | None = None, session: dict | None = None) -> AppTest:
    """One run of page with the sections in OPENED open (?open=); pass {"open": ""} for a
    page as a reader first sees it."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update({"open": OPENED, **(params or {})})
    for key, value in (session or {}).items():
        at.session_state[key] = value
    if page != "app.py":
        at.run()  # AppTest wants one run of the main script before switching
        at.switch_page(page)
    return at.run()


def texts(elements) -> list[str]:
    """Element texts as shown: markdown escapes removed."""
    return [str(e.value).replace("\\", "") for e in elements]


_BOX = re.compile(r'<span class="mv-token( mv-written)?"[^>]*><span class="mv-token-pos">(\d+)'
                  r'</span><span class="mv-token-text">(.*?)</span></span>', re.S)


def home_tokens(at: AppTest) -> list[list[tuple[str, bool]]]:
    """Each row of token boxes Home draws (mha_viz.ui.token_boxes), as (token, written by the
    model) in order."""
    rows = []
    for element in at.get("html"):
        body = element.proto.body
        if 'class="mv-tokens"' in body:
            boxes = _BOX.findall(body)
            assert [int(pos) for _, pos, _ in boxes] == list(range(len(boxes))), body[:300]
            rows.append([(html.unescape(text), bool(written)) for written, _, text in boxes])
    return rows


def charts(at: AppTest) -> list[dict]:
    return [json.loads(e.proto.spec) for e in at.get("plotly_chart")]


def folder_params(folder) -> dict:
    return {"model": "folder", "folder": str(folder)}


def chart(at: AppTest, title_part: str) -> dict:
    found = [c for c in charts(at)
             if title_part in ((c["layout"].get("title") or {}).get("text") or "")]
    assert found, [c["layout"].get("title", {}).get("text") for c in charts(at)]
    return found[0]


def array(value) -> np.ndarray:
    """A Plotly data array from the JSON spec (plain list or typed base64 block)."""
    if isinstance(value, dict) and "bdata" in value:
        out = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = [int(s) for s in str(value.get("shape", len(out))).split(",")]
        return out.reshape(shape)
    return np.array(value, dtype=float)
