"""Opening a saved trace (.npz) in the browser: shown on the map pages; pickles, foreign and
broken files refused with a message."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.browser import assert_no_exception, error_texts, open_page, settle, upload

pytestmark = pytest.mark.browser


def test_saved_trace_is_shown_and_bad_files_are_refused(page, app_server, screenshots,
                                                        gpt2_model, tmp_path):
    text = "The saved lantern glowed over the quiet harbor."
    saved = gpt2_model.trace(text)
    saved.save(tmp_path / "saved.npz")
    open_page(page, app_server, "Attention_Maps", 4)
    upload(page, tmp_path / "saved.npz")
    page.get_by_text("Showing the saved trace").wait_for()
    settle(page, 4)
    assert_no_exception(page, app_server)
    ticks = page.evaluate("""() => Array.from(document.querySelectorAll(
        '.js-plotly-plot .ytick text')).map(t => t.textContent)""")
    assert set(saved.display_tokens) <= set(ticks)  # the saved trace's own tokens label it
    assert "␣animal" not in ticks  # not the sidebar text's ("The animal didn't cross ...")
    page.screenshot(path=str(screenshots / "saved_trace_Attention_Maps.png"))

    # a pickled array (np.save of objects) is refused, never unpickled
    np.savez(tmp_path / "evil.npz", attentions=np.array([object()], dtype=object))
    page.get_by_text("Close the saved trace").click()
    settle(page, 4)
    upload(page, tmp_path / "evil.npz")
    page.get_by_text("This file cannot be opened").wait_for()
    assert any("cannot be opened" in e for e in error_texts(page))
    assert_no_exception(page, app_server)
