"""Refused link values, in chromium (issue 57 item 13): a link's model the server does not offer
and a text longer than a link carries each get one line at the top of the page saying what
was refused and what the page shows instead; a URL far past what the web server reads
(uvicorn's HTTP parser refuses a request head still incomplete past 16 KiB) gets its HTTP
400 before the app sees it, which README documents and the app's own limit keeps its links
far from."""

from __future__ import annotations

import urllib.error
import urllib.request
from urllib.parse import quote_plus

import pytest
from tests.support.browser import DEVICES, assert_no_exception, shoot, wait_home

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # the default model opens: SmolLM2

LINES = '[class*="st-key-_mv_link_notes"] [data-testid="stAlertContainer"]'


def test_a_refused_model_and_a_long_text_each_get_their_line(device_tab, app_server,
                                                             screenshots):
    tab = device_tab(DEVICES["desk"])
    # 13,200 characters: past what a link is read (12,000), within the web server's 16 KiB
    long_text = "the cat sat on the mat. " * 550
    tab.goto(f"{app_server.url}/?model=minilmx&text={quote_plus(long_text)}")
    wait_home(tab, app_server)
    lines = tab.locator(LINES).all_inner_texts()
    assert len(lines) == 2, lines
    model_line = next(line for line in lines if "model=minilmx" in line)
    assert "is not a checkpoint this server offers" in model_line
    text_line = next(line for line in lines if "The link's text" in line)
    assert "(13,200 characters) is longer than a link is read" in text_line
    assert_no_exception(tab, app_server)
    shoot(tab, screenshots, "link_refused_lines")
    # far past the server's own limit the app is never reached: the server's 400, as README
    # says (how far depends on how the request arrives: on this machine 100 KB still passed)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{app_server.url}/?text={'a' * 1_000_000}", timeout=60)
    assert refused.value.code == 400
