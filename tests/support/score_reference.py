"""An independent reference for score attribution's tests (and feature score attribution's):
transformers' softmax inputs read while a model runs, and where each family keeps its norms,
W_Q, W_K, rotary settings and scale, with the frozen norms and RoPE written in numpy (not
taken from mha_viz)."""

import contextlib

import numpy as np
import torch

from tests.support.hf_reference import hooked


@contextlib.contextmanager
def scores_read(store: list):
    """Every 4-D input of transformers' softmax while the block runs (one per layer, in
    order: the scores plus the mask), and Gemma 2's scores before its soft-cap (what its
    4-D tanh reads, times the cap, in store's second list)."""
    softmax, tanh = torch.nn.functional.softmax, torch.tanh
    store[:] = [[], []]

    def read_softmax(x, *args, **kwargs):
        if x.dim() == 4:
            store[0].append(x.detach().double().clone())
        return softmax(x, *args, **kwargs)

    def read_tanh(x, *args, **kwargs):
        if x.dim() == 4:
            store[1].append(x.detach().double().clone())
        return tanh(x, *args, **kwargs)

    torch.nn.functional.softmax, torch.tanh = read_softmax, read_tanh
    try:
        yield
    finally:
        torch.nn.functional.softmax, torch.tanh = softmax, tanh


def run_reference(case, hf, ids, hooks=()):
    with torch.no_grad(), hooked(list(hooks)):
        if case == "t5":
            hf.encoder(input_ids=torch.tensor([ids]))
        else:
            hf(torch.tensor([ids]))


def numpy_of(tensor) -> np.ndarray:
    return tensor.detach().double().numpy()


def rms_frozen(x, stream, weight, eps):
    """An RMSNorm applied to x with the scale of `stream` (the norm's own input)."""
    return weight * x / np.sqrt((stream ** 2).mean(-1, keepdims=True) + eps)


def ln_frozen(x, stream, weight, eps):
    """A LayerNorm's linear part on x with the scale of `stream` (its beta is the bias
    source's)."""
    return weight * (x - x.mean(-1, keepdims=True)) / np.sqrt(stream.var(-1, keepdims=True)
                                                              + eps)


def rotate(x, position, theta, rotary_dim):
    """RoPE on the first rotary_dim dimensions of x [d_k] (pairs j, j + r/2)."""
    half = rotary_dim // 2
    angles = position / theta ** (np.arange(half) * 2 / rotary_dim)
    cos, sin = np.cos(angles), np.sin(angles)
    out = x.copy()
    a, b = x[:half], x[half:rotary_dim]
    out[:half], out[half:rotary_dim] = a * cos - b * sin, b * cos + a * sin
    return out


class Reference:
    """Where transformers keeps what the entry needs, per family (the names of its own
    modules), and the entry computed from them."""

    def __init__(self, case, hf):
        self.case, self.hf, self.config = case, hf, hf.config
        if case == "gpt2":
            self.layers = hf.transformer.h
        elif case == "bert":
            self.layers = hf.encoder.layer
        elif case == "pythia":
            self.layers = hf.gpt_neox.layers
        elif case == "t5":
            self.layers = hf.encoder.block
        else:
            self.layers = hf.model.layers

    def attention(self, layer):
        block = self.layers[layer]
        return {"gpt2": lambda: block.attn, "bert": lambda: block.attention.self,
                "pythia": lambda: block.attention,
                "t5": lambda: block.layer[0].SelfAttention}.get(self.case,
                                                               lambda: block.self_attn)()

    def out_proj(self, layer):
        attention = self.attention(layer)
        return {"gpt2": lambda: attention.c_proj,
                "bert": lambda: self.layers[layer].attention.output.dense,
                "pythia": lambda: attention.dense, "t5": lambda: attention.o}.get(
            self.case, lambda: attention.o_proj)()

    def pre_norm(self, layer):
        block = self.layers[layer]
        return {"gpt2": lambda: block.ln_1, "bert": lambda: None,
                "t5": lambda: block.layer[0].layer_norm}.get(self.case,
                                                             lambda: block.input_layernorm)()

    @property
    def n_head(self):
        return self.config.num_heads if self.case == "t5" else self.config.num_attention_heads

    @property
    def d_k(self):
        if self.case == "t5":
            return self.config.d_kv
        return getattr(self.config, "head_dim", None) or self.config.hidden_size // self.n_head

    def embeddings(self, ids):
        hf = self.hf
        table = {"gpt2": lambda: hf.transformer.wte, "bert": lambda: hf.embeddings.word_embeddings,
                 "pythia": lambda: hf.gpt_neox.embed_in, "t5": lambda: hf.shared}.get(
            self.case, lambda: hf.model.embed_tokens)()
        scale = self.config.hidden_size ** 0.5 if self.case == "gemma2" else 1.0
        return numpy_of(table.weight)[ids] * scale

    def w_o(self, layer, head):
        """[d, d_k]: head's slice of W_O (its output is z_h @ w_o.T)."""
        weight = numpy_of(self.out_proj(layer).weight)
        cols = slice(head * self.d_k, (head + 1) * self.d_k)
        return weight[cols].T if self.case == "gpt2" else weight[:, cols]

    def w_qk(self, layer, part, head):
        """[d_k, d] W_Q of a query head or W_K of a key/value head (x @ w.T)."""
        attention, d_k = self.attention(layer), self.d_k
        rows = slice(head * d_k, (head + 1) * d_k)
        if self.case == "gpt2":
            offset = {"q": 0, "k": self.config.n_embd}[part]
            return numpy_of(attention.c_attn.weight)[:, offset + rows.start:offset + rows.stop].T
        if self.case == "pythia":
            offset = head * 3 * d_k + {"q": 0, "k": d_k}[part]
            return numpy_of(attention.query_key_value.weight)[offset:offset + d_k]
        module = {"bert": {"q": "query", "k": "key"}, "t5": {"q": "q", "k": "k"}}.get(
            self.case, {"q": "q_proj", "k": "k_proj"})[part]
        return numpy_of(getattr(attention, module).weight)[rows]

    def kv_head(self, head):
        n_kv = getattr(self.config, "num_key_value_heads", None) or self.n_head
        return head // (self.n_head // n_kv)

    def rotary(self):
        """(theta, rotary_dim) or None."""
        if self.case in ("gpt2", "bert", "t5"):
            return None
        parameters = self.config.rope_parameters
        fraction = parameters.get("partial_rotary_factor", 1.0)
        return parameters["rope_theta"], int(self.d_k * fraction)

    def scale(self):
        if self.case == "t5":
            return 1.0
        if self.case == "gemma2":
            return self.config.query_pre_attn_scalar ** -0.5
        return self.d_k ** -0.5
