"""An independent reference for the intervention tests: where transformers' own GPT-2 and
Llama hold each activation, and forward hooks that read or replace it (written here, not
taken from mha_viz); one GPT-2 head's pre-softmax scores, written in numpy from its input."""

import contextlib

import numpy as np
import torch

TEXT = "the cat sat on the mat and the dog ran to the"


class GPT2Hooks:
    """Where transformers' GPT-2 holds each activation."""

    def __init__(self, hf):
        self.hf = hf
        config = hf.config
        self.n_layer, self.n_head = config.n_layer, config.n_head
        self.d = config.n_embd
        self.dk = self.d // self.n_head

    def block(self, layer):
        return self.hf.transformer.h[layer]

    def attn(self, layer):
        return self.block(layer).attn

    def out_proj(self, layer):  # its input is every head's z, [B, T, H * d_k]
        return self.attn(layer).c_proj

    def mlp(self, layer):
        return self.block(layer).mlp

    def qkv_module(self, part, layer):
        return self.attn(layer).c_attn

    def qkv_slice(self, part, head):
        offset = {"q": 0, "k": self.d, "v": 2 * self.d}[part]
        return slice(offset + head * self.dk, offset + (head + 1) * self.dk)

    kv_function = None  # MHA: a query head's key is its own


class LlamaHooks(GPT2Hooks):
    def __init__(self, hf):
        self.hf = hf
        config = hf.config
        self.n_layer, self.n_head = config.num_hidden_layers, config.num_attention_heads
        self.n_kv_head = config.num_key_value_heads
        self.d = config.hidden_size
        self.dk = config.head_dim

    def block(self, layer):
        return self.hf.model.layers[layer]

    def attn(self, layer):
        return self.block(layer).self_attn

    def out_proj(self, layer):
        return self.attn(layer).o_proj

    def qkv_module(self, part, layer):
        return getattr(self.attn(layer), f"{part}_proj")

    def qkv_slice(self, part, head):  # q: a query head; k, v: a key/value head
        return slice(head * self.dk, (head + 1) * self.dk)

    kv_function = "repeat_kv"


class NeoXHooks(GPT2Hooks):
    """transformers' GPT-NeoX (Pythia): attention and MLP in parallel, W_Q, W_K, W_V fused
    head by head in query_key_value ([q_h; k_h; v_h] for each head)."""

    def __init__(self, hf):
        self.hf = hf
        config = hf.config
        self.n_layer, self.n_head = config.num_hidden_layers, config.num_attention_heads
        self.d = config.hidden_size
        self.dk = self.d // self.n_head

    def block(self, layer):
        return self.hf.gpt_neox.layers[layer]

    def attn(self, layer):
        return self.block(layer).attention

    def out_proj(self, layer):
        return self.attn(layer).dense

    def qkv_module(self, part, layer):
        return self.attn(layer).query_key_value

    def qkv_slice(self, part, head):
        offset = head * 3 * self.dk + {"q": 0, "k": self.dk, "v": 2 * self.dk}[part]
        return slice(offset, offset + self.dk)


@contextlib.contextmanager
def hooked(handles):
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def replace_input(module, positions_fn):
    """A forward pre-hook replacing the module's first input by positions_fn(input)."""
    return module.register_forward_pre_hook(
        lambda mod, args: (positions_fn(args[0]),) + tuple(args[1:]))


def replace_output(module, fn):
    def hook(mod, args, output):
        if isinstance(output, tuple):
            return (fn(output[0]),) + tuple(output[1:])
        return fn(output)
    return module.register_forward_hook(hook)


def take(source, index):
    """x -> a copy of x with x[index] taken from source (what a patching hook does)."""
    def swap(x):
        x = x.clone()
        x[index] = source[index]
        return x
    return swap


def capture_input(module, store, key):
    def hook(mod, args):
        store[key] = args[0].detach().clone()
    return module.register_forward_pre_hook(hook)


def capture_output(module, store, key):
    def hook(mod, args, output):
        store[key] = (output[0] if isinstance(output, tuple) else output).detach().clone()
    return module.register_forward_hook(hook)


def hf_metric(hf, ids, target, contrast):
    with torch.no_grad():
        logits = hf(torch.tensor([ids])).logits[0, -1]
    return float(logits[target] - logits[contrast])


@contextlib.contextmanager
def pattern_patch(monkeypatch, layer, head, source_patterns):
    """transformers computes the weights inside a function: wrap the dropout it applies to
    them (a no-op in eval mode; the only 4-D dropout) to swap in one head's pattern."""
    original = torch.nn.functional.dropout
    seen = {"n": 0}

    def dropout(x, *args, **kwargs):
        out = original(x, *args, **kwargs)
        if x.dim() == 4:
            if seen["n"] == layer:
                out = out.clone()
                out[:, head] = source_patterns[layer][:, head]
            seen["n"] += 1
        return out

    monkeypatch.setattr(torch.nn.functional, "dropout", dropout)
    yield
    monkeypatch.setattr(torch.nn.functional, "dropout", original)


def pattern_capture(monkeypatch, store):
    original = torch.nn.functional.dropout

    def dropout(x, *args, **kwargs):
        out = original(x, *args, **kwargs)
        if x.dim() == 4:
            store.append(out.detach().clone())
        return out

    monkeypatch.setattr(torch.nn.functional, "dropout", dropout)
    return original


def ids_of(model, text):
    return model.encode(text).input_ids


def target_metric(prompt):
    """The logit difference target - contrast at the last token of a patch_prompts entry."""
    from mha_viz import TargetMetric

    return TargetMetric(-1, prompt[2], prompt[3], "logit_diff")


def head_outputs(hf, where, ids_rows, layers):
    """layer -> every head's z (the output projection's input) [R, T, H * d_k] of each row of
    ids_rows (prompts of one token count), from unhooked runs."""
    store = {}
    with torch.no_grad(), hooked([capture_input(where.out_proj(l), store, l) for l in layers]):
        hf(torch.tensor(ids_rows))
    return store


def logits_with_heads_replaced(hf, where, ids, replaced):
    """The last position's logits [vocab] of ids with each (layer, head) -> value [T, d_k] of
    `replaced` put in that head's slice of the output projection's input (all at once)."""
    by_layer = {}
    for (layer, head), value in replaced.items():
        by_layer.setdefault(layer, []).append((head, value))

    def swap(heads):
        def fn(x):
            x = x.clone()
            for head, value in heads:
                x[0, :, head * where.dk:(head + 1) * where.dk] = value
            return x
        return fn
    with torch.no_grad(), hooked([replace_input(where.out_proj(layer), swap(heads))
                                  for layer, heads in by_layer.items()]):
        return hf(torch.tensor([ids])).logits[0, -1]


def repeated_random_probe(tokenizer, vocab_size: int, seq_len: int, n_seqs: int,
                          seed: int) -> list[list[int]]:
    """The induction probe's inputs as docs/analyses.md defines them (written here, not taken
    from mha_viz): BOS, then seq_len distinct ids drawn without replacement from the
    vocabulary less the special ids (numpy default_rng(seed)), then the same ids again."""
    import numpy as np

    candidates = np.setdiff1d(np.arange(vocab_size), tokenizer.all_special_ids)
    rng = np.random.default_rng(seed)
    probe = []
    for _ in range(n_seqs):
        drawn = rng.choice(candidates, size=seq_len, replace=False).tolist()
        probe.append([tokenizer.bos_token_id] + drawn + drawn)
    return probe


def gate_heads(out_projections, gates, n_head):
    """Forward pre-hooks multiplying each head's slice of each layer's output-projection
    input (its z) by gates[layer, head], a tensor autograd reaches: 0 removes the head, as
    Michel et al.'s head mask does. -> the handles (for hooked)."""
    def gate(layer):
        def hook(module, args):
            z = args[0].view(*args[0].shape[:-1], n_head, args[0].shape[-1] // n_head)
            return ((z * gates[layer][:, None].to(z.dtype)).reshape(args[0].shape),)
        return hook
    return [module.register_forward_pre_hook(gate(layer))
            for layer, module in enumerate(out_projections)]


def gpt2_loss_with_gates(hf, ids, gates):
    """transformers' GPT-2 next-token loss on ids (one prompt) with its heads gated
    (gate_heads on each layer's c_proj)."""
    ids = torch.tensor([list(ids)])
    with hooked(gate_heads([block.attn.c_proj for block in hf.transformer.h], gates,
                           hf.config.n_head)):
        return hf(ids, labels=ids).loss


def gpt2_head_importance(hf, ids, mask=None):
    """(ablation effects, gradient importance), [L, H] numpy each, of transformers' GPT-2 on
    ids at a head mask (default every head kept): the loss with each kept head also removed
    minus the loss (0 for a head already removed), and |d loss / d gate|."""
    config = hf.config
    mask = torch.ones(config.n_layer, config.n_head) if mask is None else torch.as_tensor(
        mask, dtype=torch.float32)
    effects = torch.zeros(config.n_layer, config.n_head, dtype=torch.float64)
    with torch.no_grad():
        base = float(gpt2_loss_with_gates(hf, ids, mask))
        for layer, head in mask.nonzero().tolist():
            gates = mask.clone()
            gates[layer, head] = 0.0
            effects[layer, head] = float(gpt2_loss_with_gates(hf, ids, gates)) - base
    gates = mask.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(gpt2_loss_with_gates(hf, ids, gates), gates)
    return effects.numpy(), gradient.abs().double().numpy()


def reference_prompts(model, text, n=3):
    """Prompts of the text's token count: one token swapped at a different place each."""
    from mha_viz.analysis.prompts import swap_token

    ids = model.encode(text).input_ids
    return [swap_token(model, text, 2 + i, ids[-1 - i]) for i in range(n)]


def gpt2_head_scores(hf, ids, layer, head) -> np.ndarray:
    """[T, T] pre-softmax scores of one head: ln_1's output captured by a hook, then
    q k^T / sqrt(d_k) written here from the checkpoint's c_attn."""
    read = {}
    block = hf.transformer.h[layer]

    def keep(module, args, kwargs):
        read["x"] = (args[0] if args else kwargs["hidden_states"])[0].double().numpy()

    handle = block.attn.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        with torch.no_grad():
            hf(torch.tensor([ids]))
    finally:
        handle.remove()
    d = hf.config.n_embd
    d_k = d // hf.config.n_head
    w = block.attn.c_attn.weight.detach().double().numpy()
    b = block.attn.c_attn.bias.detach().double().numpy()
    qkv = read["x"] @ w + b
    q = qkv[:, head * d_k:(head + 1) * d_k]
    k = qkv[:, d + head * d_k:d + (head + 1) * d_k]
    return q @ k.T / np.sqrt(d_k)
