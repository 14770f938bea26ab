"""The project's one hash (mha_viz.core.digest): canonical across processes, equal for equal
values (a list and a tuple, a dict in any order, an array and its contiguous copy), different
for different ones (types, lengths, dtypes, shapes), refusing what it cannot name; call_key
fills in defaults; a model and a trace name themselves by what made them."""

import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest

from mha_viz.core.digest import call_key, digest


def test_the_same_values_give_the_same_name_in_another_process():
    values = ("text", 3, 2.5, None, True, [1, 2, 3], {"b": 1, "a": (2, "x")},
              np.arange(12, dtype=np.float32).reshape(3, 4), b"\x00\x01", list(range(100)))
    here = digest(*values)
    program = ("import numpy as np, sys; from mha_viz.core.digest import digest; "
               "print(digest('text', 3, 2.5, None, True, [1, 2, 3], {'a': (2, 'x'), 'b': 1}, "
               "np.arange(12, dtype=np.float32).reshape(3, 4), b'\\x00\\x01', "
               "list(range(100))))")
    # another hash seed: Python's own hash() of a str would differ
    there = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "12345", "PATH": ""},
                           cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert there.stdout.strip() == here
    assert len(here) == 32 and int(here, 16) >= 0


def test_equal_values_give_one_name():
    assert digest([1, 2, "a"]) == digest((1, 2, "a"))
    assert digest({"a": 1, "b": [2]}) == digest({"b": (2,), "a": 1})
    a = np.arange(24, dtype=np.int64).reshape(4, 6)
    assert digest(a[:, ::2]) == digest(np.ascontiguousarray(a[:, ::2]))
    assert digest(list(range(50))) == digest(tuple(range(50)))
    assert digest({3, 1, 2}) == digest({2, 3, 1})


@pytest.mark.parametrize("one, other", [
    (1, 1.0), (1, True), (1, "1"), (0, None), ("", b""), (0.0, -0.0),
    (["ab"], ["a", "b"]), (("a", "bc"), ("ab", "c")), ([[1], 2], [1, [2]]),
    ({"a": 1}, {"a": 2}), ({"a": 1}, [("a", 1)]),
    (list(range(20)), list(range(19))), (list(range(20)), [float(i) for i in range(20)]),
    (np.zeros(4, np.float32), np.zeros(4, np.float64)),
    (np.zeros((2, 3)), np.zeros((3, 2))), (np.zeros(3), [0.0, 0.0, 0.0]),
])
def test_different_values_give_different_names(one, other):
    assert digest(one) != digest(other)


def test_the_order_of_values_counts():
    assert digest("a", "b") != digest("b", "a")
    assert digest([1, 2]) != digest([2, 1])


def test_what_it_cannot_name_is_refused():
    with pytest.raises(TypeError, match="identity"):
        digest(object())
    with pytest.raises(TypeError):
        digest(np.array([object()]))


@dataclass(frozen=True)
class Point:
    x: int
    y: float = 0.0


class Named:
    def __init__(self, name, cache):
        self.name, self.cache = name, cache  # cache: not part of what it is

    def identity(self):
        return (self.name,)


def test_objects_name_themselves():
    assert digest(Point(1, 2.0)) == digest(Point(1, 2.0)) != digest(Point(1, 3.0))
    assert digest(Named("a", object())) == digest(Named("a", object()))
    assert digest(Named("a", None)) != digest(Named("b", None))
    assert digest(Named("a", None)) != digest(("a",))  # the class is part of the name


def scaled(x, factor=2, *, mode="zero"):
    return x * factor


def test_a_call_is_named_by_its_function_and_its_arguments_as_read():
    base = call_key(scaled, 3)
    assert base == call_key(scaled, 3, 2) == call_key(scaled, x=3, mode="zero")
    assert base.startswith(f"{__name__}.scaled:")
    assert base != call_key(scaled, 3, 4)
    assert base != call_key(scaled, 3, mode="mean")
    with pytest.raises(TypeError, match="module level"):
        call_key(lambda x: x, 1)

    def local(x):
        return x
    with pytest.raises(TypeError, match="module level"):
        call_key(local, 1)


def test_a_model_and_its_traces_name_themselves(gpt2_folder, gpt2_model, bert_model):
    from mha_viz import load_model
    from mha_viz.analysis import shown_trace
    from mha_viz.maps.trace import AttentionTrace

    again = load_model(gpt2_folder)
    assert again is not gpt2_model and digest(again) == digest(gpt2_model)
    assert digest(gpt2_model) != digest(bert_model)
    # a bound method names its object: the same method of the same checkpoint is one call
    assert call_key(again.score, "a b") == call_key(gpt2_model.score, "a b", metric=None)
    assert call_key(gpt2_model.score, "a b") != call_key(bert_model.score, "a b")

    text = "The cat sat on the mat."
    trace = gpt2_model.trace(text)
    assert digest(trace) == digest(again.trace(text))  # traced again: the same input
    assert digest(trace) != digest(gpt2_model.trace(text + " Then it slept."))
    mask = np.ones((2, 4), np.float32)
    mask[0, 1] = 0
    masked = gpt2_model.trace(text, head_mask=mask)
    assert digest(masked) != digest(trace)
    keep = np.ones(trace.n_tokens, bool)
    keep[0] = False
    assert digest(shown_trace(trace, keep)) != digest(trace)
    # a file is named by its content: read twice, one name; other maps, another name
    data = trace.to_bytes()
    read = AttentionTrace.load(data)
    assert digest(read) == digest(AttentionTrace.load(data)) != digest(trace)
    changed = AttentionTrace.load(masked.to_bytes())
    assert digest(changed) != digest(read)
    # a trace built by hand is named by its maps
    by_hand = AttentionTrace(tokens=trace.tokens, token_ids=trace.token_ids,
                             attentions=np.array(trace.attentions),
                             display_tokens=trace.display_tokens,
                             special_mask=trace.special_mask, segment_ids=trace.segment_ids,
                             causal=True)
    other = np.array(masked.attentions)
    assert digest(by_hand) != digest(AttentionTrace(
        tokens=trace.tokens, token_ids=trace.token_ids, attentions=other,
        display_tokens=trace.display_tokens, special_mask=trace.special_mask,
        segment_ids=trace.segment_ids, causal=True))
