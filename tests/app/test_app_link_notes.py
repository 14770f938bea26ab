"""Refused link values say so (issue 57 item 13), through AppTest: every query parameter a
page cannot use gets one line at the top of the page saying what was refused and what the page
uses instead: a continuation's count, temperature and seed out of range or not numbers, a
count cut to Max tokens, a model the server does not offer (a path, a typo), a lesson step
past the lesson's end, a text longer than a link is read. Values a page accepts get no line.
The random GPT-2 of tests/conftest.py writes; MiniLM is the default model where a link's model
is refused (MHA_VIZ_DEFAULT_MODEL), so no test here loads SmolLM2."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
from tests.support.app_pages import folder_params, run_page, texts  # noqa: E402

PROMPT = "the cat sat on the mat and the dog ran to the"
INSIDE = "pages/5_Inside_One_Head.py"


@pytest.fixture(autouse=True)
def _minilm_by_default(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_DEFAULT_MODEL", "minilm")


def lines(at) -> list[str]:
    """The lines about the link (info boxes of the page's main area)."""
    return [t for t in texts(at.main.info) if t.startswith("The link") or "(cont=" in t]


def clean(at) -> None:
    assert not at.exception, texts(at.exception)
    assert not at.error, texts(at.error)


def home(folder, **extra):
    return run_page("app.py", {**folder_params(folder), "text": PROMPT, **extra})


@pytest.mark.parametrize("raw", ["-5", "abc", "99999999"])
def test_a_refused_count_says_nothing_was_written(gpt2_folder, raw):
    at = home(gpt2_folder, cont=raw)
    clean(at)
    [line] = lines(at)
    assert f"cont={raw}" in line and "the model wrote nothing after the text" in line, line
    assert "cont" not in at.query_params


@pytest.mark.parametrize("raw", ["1e9", "nan", "-1", "warm"])
def test_a_refused_temperature_says_the_model_writes_greedily(gpt2_folder, raw):
    at = home(gpt2_folder, cont="3", ctemp=raw)
    clean(at)
    [line] = lines(at)
    assert f"ctemp={raw}" in line and "greedily (temperature 0" in line, line
    assert at.query_params["cont"] == "3" and "ctemp" not in at.query_params


def test_a_refused_seed_says_which_seed_is_used(gpt2_folder):
    at = home(gpt2_folder, cont="3", ctemp="0.8", cseed="-1")
    clean(at)
    [line] = lines(at)
    assert "cseed=-1" in line and "seed 0 is used." in line, line


def test_a_count_cut_to_max_tokens_says_how_many_were_written(gpt2_folder):
    from mha_viz import load_model

    n_prompt = len(load_model(gpt2_folder).encode(PROMPT).input_ids)
    at = home(gpt2_folder, cont="100000", max_tokens=str(n_prompt + 5))
    clean(at)
    [line] = lines(at)
    assert "100,000 tokens to write were asked for" in line and "wrote 5" in line, line


def test_accepted_values_get_no_line(gpt2_folder):
    at = home(gpt2_folder, cont="3", ctemp="0.5", cseed="7")
    clean(at)
    assert lines(at) == []


@pytest.mark.parametrize("raw", ["/etc", "../../../etc/passwd", "minilmx"])
def test_a_model_the_server_does_not_offer_is_named_and_the_default_opened(raw):
    at = run_page("app.py", {"model": raw})
    clean(at)
    [line] = lines(at)
    assert f"model={raw}" in line and "is not a checkpoint this server offers" in line, line
    assert "MiniLM" in line  # what opened instead
    assert at.sidebar.selectbox(key="_mv_w_model").value == "minilm"


def test_a_lesson_step_past_the_end_opens_the_first_and_says_so(gpt2_folder):
    at = run_page(INSIDE, {**folder_params(gpt2_folder), "text": PROMPT, "lesson": "1",
                           "lstep": "999"})
    clean(at)
    [line] = lines(at)
    assert "lstep=999" in line and "Lesson step" in line, line
    assert at.selectbox(key="_mv_w_lstep").value == 1


def test_a_text_longer_than_a_link_is_read_is_refused_with_its_length(gpt2_folder):
    long_text = "the cat sat on the mat. " * 520  # 12,480 characters
    at = run_page("app.py", {**folder_params(gpt2_folder), "text": long_text})
    clean(at)
    [line] = lines(at)
    assert f"({len(long_text):,} characters) is longer than a link is read" in line, line
    assert at.sidebar.text_area(key="_mv_w_text").value != long_text
