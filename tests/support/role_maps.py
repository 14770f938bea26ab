"""Hand-built traces and maps for the head-role tests (uniform, previous-token and exact
induction heads, written out), and a fake model of two layers x three heads whose head 1.2 is
an exact induction head."""

from types import SimpleNamespace

import numpy as np

from mha_viz.maps.trace import AttentionTrace


# the special tokens a BERT tokenizer names (a trace records them from the tokenizer)
BERT_SPECIALS = {"cls": "[CLS]", "sep": "[SEP]"}


def make_trace(tokens, attentions, display=None, causal=False, token_ids=None,
               special_tokens=BERT_SPECIALS):
    n = len(tokens)
    return AttentionTrace(
        tokens=list(tokens), token_ids=list(token_ids if token_ids is not None else range(n)),
        attentions=attentions, display_tokens=list(display if display is not None else tokens),
        special_mask=np.array([t in ("[CLS]", "[SEP]", "<|endoftext|>") for t in tokens]),
        segment_ids=np.zeros(n, int), causal=causal, special_tokens=dict(special_tokens))


def uniform(n, causal=False):
    a = np.tril(np.ones((n, n))) if causal else np.ones((n, n))
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)


def previous_token_map(n):
    a = np.zeros((n, n), dtype=np.float32)
    a[0, 0] = 1.0
    a[np.arange(1, n), np.arange(n - 1)] = 1.0
    return a


def induction_map(ids):
    """Exact induction head: attend to the token after the previous occurrence, else self."""
    n = len(ids)
    a = np.zeros((n, n), dtype=np.float32)
    for i in range(n):
        earlier = [j for j in range(i) if ids[j] == ids[i]]
        a[i, earlier[-1] + 1 if earlier else i] = 1.0
    return a


class FakeTokenizer:
    all_special_ids = [0, 1, 2, 3]

    def __init__(self, arch):
        if arch == "bert":
            self.cls_token_id, self.sep_token_id = 2, 3
            self.bos_token_id = self.eos_token_id = None
        else:
            self.bos_token_id, self.eos_token_id = None, 0  # GPT-2 style: only <|endoftext|>


class FakeModel:
    """Two layers x three heads; head 1.2 is an exact induction head, the rest uniform."""

    def __init__(self, arch="gpt2", vocab_size=500, max_positions=256):
        self.info = SimpleNamespace(model_type=arch, causal=arch != "bert", vocab_size=vocab_size,
                                    max_positions=max_positions, n_layer=2, n_head=3)
        self.tokenizer = FakeTokenizer(arch)
        self.calls = []

    def trace_ids(self, ids):
        assert isinstance(ids, list) and all(type(i) is int for i in ids)
        self.calls.append(ids)
        n = len(ids)
        causal = self.info.causal
        a = np.broadcast_to(uniform(n, causal), (2, 3, n, n)).copy()
        a[1, 2] = induction_map(ids)
        return make_trace([f"t{i}" for i in ids], a, token_ids=ids, causal=causal)
