"""Continue (issue 49 item 3, in the app), through AppTest on a random GPT-2: a link's cont=N
writes the tokens transformers' own generate writes (greedy), Home draws them as boxes of their
own, every page reads the text and the continuation together with the written tokens marked,
the continuation lives in the URL and the session and is removed (said so) when the text
changes; 0 tokens and a request past the context get a message; a model that cannot write says
why. The reference is transformers' GPT2LMHeadModel.generate on the same checkpoint."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("streamlit")

from tests.support.app_pages import (charts, folder_params, home_tokens, run_page,  # noqa: E402
                                     texts)

from mha_viz import load_model  # noqa: E402

PROMPT = "the cat sat on the mat and the dog ran to the"
MARK = "✎"


def clean(at):
    assert not at.exception, texts(at.exception)
    assert not at.error, texts(at.error)


def hf_continuation(folder, text: str, n: int) -> tuple[list[int], list[int], str]:
    """(prompt ids, new ids, the continuation's text) from transformers alone."""
    from transformers import AutoTokenizer, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(folder)
    hf = GPT2LMHeadModel.from_pretrained(folder).eval()
    ids = tokenizer(text)["input_ids"]
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                          pad_token_id=tokenizer.eos_token_id)
    new = out[0, len(ids):].tolist()
    before = tokenizer.decode(ids)
    return ids, new, tokenizer.decode(ids + new)[len(before):]


def link(folder, **extra) -> dict:
    return {**folder_params(folder), "text": PROMPT, **extra}


def test_a_link_writes_the_continuation_and_every_page_marks_it(gpt2_folder):
    prompt_ids, new_ids, written = hf_continuation(gpt2_folder, PROMPT, 6)
    model = load_model(gpt2_folder)
    whole = model.encode(PROMPT + written).input_ids
    assert whole[:len(prompt_ids)] == prompt_ids
    expected = model.display_tokens(whole)

    at = run_page("app.py", link(gpt2_folder, cont="6"))
    clean(at)
    [row] = home_tokens(at)
    assert [token for token, _ in row] == [
        token if i < len(prompt_ids) else MARK + token for i, token in enumerate(expected)]
    assert [flag for _, flag in row] == [i >= len(prompt_ids) for i in range(len(whole))]
    assert at.query_params["cont"] == "6" and at.query_params["text"] == PROMPT
    shown = " ".join(texts(at.markdown))
    assert "The model wrote 6 tokens" in shown and written.strip()[:8] in shown
    assert at.sidebar.text_area[0].value == PROMPT  # the box keeps what was typed
    assert "Then the model's continuation" in " ".join(texts(at.sidebar.caption))

    # the other pages read the text and the continuation, the written tokens marked, and say
    # once what the mark means
    for page, labelled in (("pages/2_Entropy.py", "entropy of each query"),
                           ("pages/1_Attention_Maps.py", "L"),
                           ("pages/6_Predictions.py", "How surprised")):
        at.switch_page(page).run()
        clean(at)
        assert at.query_params["cont"] == "6", page
        marks = [c for c in texts(at.caption) if c.startswith(MARK + " marks the")]
        assert len(marks) == 1 and "6 tokens the model wrote" in marks[0], page
        assert any(MARK in str(spec) for spec in charts(at)), page
    strip = next(c for c in charts(at) if "How surprised" in c["layout"]["title"]["text"])
    cells = [t for row in strip["data"][0]["text"] for t in row if t]
    assert sum(t.startswith(MARK) for t in cells) == len(whole) - len(prompt_ids)


def test_continue_asks_for_more_and_says_why_not(gpt2_folder):
    at = run_page("app.py", link(gpt2_folder))
    clean(at)
    assert "cont" not in at.query_params
    count = at.number_input(key="_mv_w_cont_n")
    count.set_value(0).run()
    at.button(key="_mv_continue").click().run()
    assert any("Ask for one token or more" in w for w in texts(at.warning))
    assert "cont" not in at.query_params
    context = load_model(gpt2_folder).info.max_positions
    at.number_input(key="_mv_w_cont_n").set_value(context).run()
    at.button(key="_mv_continue").click().run()
    warning = " ".join(texts(at.warning))
    assert "past the end" in warning and f"context is {context:,}" in warning, warning
    at.number_input(key="_mv_w_cont_n").set_value(3).run()
    at.button(key="_mv_continue").click().run()
    clean(at)
    assert at.query_params["cont"] == "3"
    at.button(key="_mv_continue").click().run()  # Continue further: 3 more
    assert at.query_params["cont"] == "6"
    _, _, written = hf_continuation(gpt2_folder, PROMPT, 6)
    assert sum(flag for _, flag in home_tokens(at)[0]) == len(
        load_model(gpt2_folder).encode(PROMPT + written).input_ids) - len(
        load_model(gpt2_folder).encode(PROMPT).input_ids)
    # the text changes: the continuation of the old one is removed, and the sidebar says so
    at.sidebar.text_area[0].set_value("a new text about birds").run()
    clean(at)
    assert "cont" not in at.query_params
    assert not any(flag for _, flag in home_tokens(at)[0])
    assert any("continuation of the previous one was removed" in c
               for c in texts(at.sidebar.caption))


def test_sampling_is_reproduced_by_its_seed(gpt2_folder):
    """Temperature 1.5, seed 7 in a link: two fresh sessions write the same tokens; another
    seed writes others (the random GPT-2's guesses are spread out)."""
    def written(seed):
        at = run_page("app.py", link(gpt2_folder, cont="8", ctemp="1.5", cseed=str(seed)))
        clean(at)
        assert at.query_params["ctemp"] == "1.5" and at.query_params["cseed"] == str(seed)
        assert "sampled at temperature 1.5, seed " + str(seed) in " ".join(texts(at.markdown))
        return [token for token, flag in home_tokens(at)[0] if flag]

    first = written(7)
    assert first and written(7) == first
    assert written(8) != first


def test_a_model_that_cannot_write_says_why(bert_folder):
    at = run_page("app.py", {**folder_params(bert_folder), "text": PROMPT, "cont": "5"})
    clean(at)
    shown = " ".join(texts(at.caption))
    assert "No *Continue* here" in shown.replace("\\", "") or "No Continue here" in shown
    assert "reads the whole text at once" in shown
    assert at.get("number_input") == [] or not [n for n in at.number_input
                                                if n.label == "Tokens to write"]
    assert "cont" not in at.query_params
    assert not any(flag for _, flag in home_tokens(at)[0])


def test_a_link_writes_no_further_than_the_pages_read(gpt2_folder):
    """A hostile or stale link (cont=100000) makes the model write only up to the sidebar's
    Max tokens, not to the model's context: tokens no page shows would cost the server their
    time. A text that already fills Max tokens gets nothing written, and a note."""
    n_prompt = len(load_model(gpt2_folder).encode(PROMPT).input_ids)
    at = run_page("app.py", link(gpt2_folder, cont="100000", max_tokens=str(n_prompt + 5)))
    clean(at)
    assert at.query_params["cont"] == "5"
    _, new_ids, _ = hf_continuation(gpt2_folder, PROMPT, 5)
    assert sum(flag for _, flag in home_tokens(at)[0]) == len(new_ids) == 5
    assert at.number_input(key="_mv_w_max_tokens").value == n_prompt + 5

    full = run_page("app.py", link(gpt2_folder, cont="40", max_tokens=str(n_prompt)))
    clean(full)
    assert "cont" not in full.query_params
    assert not any(flag for _, flag in home_tokens(full)[0])
    assert any("already fills *Max tokens*" in c or "already fills Max tokens" in c
               for c in texts(full.sidebar.caption))


def test_a_links_max_tokens_the_sidebar_refuses_does_not_set_the_writing(gpt2_folder):
    """Max tokens outside 2..context in a link is refused by the sidebar (its default
    stands): the continuation is cut by the same rule, not by the link's number."""
    model = load_model(gpt2_folder)
    n_prompt = len(model.encode(PROMPT).input_ids)
    default = min(model.info.max_positions, 512)
    for refused in ("1", str(model.info.max_positions + 50), "many"):
        at = run_page("app.py", link(gpt2_folder, cont="100000", max_tokens=refused))
        clean(at)
        assert at.number_input(key="_mv_w_max_tokens").value == default, refused
        assert int(at.query_params["cont"]) == default - n_prompt, refused
