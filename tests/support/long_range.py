"""What the long-range tests share: a random grouped-query Llama (ours and transformers'
eager LlamaForCausalLM of the same folder), and transformers' own rotated queries and keys,
read with a pre-hook on each layer's self-attention and transformers' apply_rotary_pos_emb."""

import numpy as np
import pytest
import torch

from mha_viz import load_model


@pytest.fixture(scope="module")
def llama_pair(tmp_path_factory):
    """(ours, transformers' LlamaForCausalLM, eager): 3 layers of 6 query heads on 2
    key/value heads, a context of 1,024 tokens."""
    from transformers import LlamaForCausalLM

    from mha_viz.testing import make_llama_checkpoint

    folder = make_llama_checkpoint(tmp_path_factory.mktemp("llama_long_range"), n_layer=3,
                                   n_head=6, n_kv_head=2, d_model=96, n_positions=1024)
    ref = LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    return load_model(folder), ref


def rotated_queries_keys(ref, ids):
    """(attentions [L, H, T, T], [(q [H, T, d], k [H_kv, T, d]) per layer], logits [T, V]):
    transformers' own forward, its queries and keys after rotary positions, as its attention
    scores them."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    found, handles = [], []
    for block in ref.model.layers:
        def read(module, args, kwargs):
            hidden = kwargs["hidden_states"]
            cos, sin = kwargs["position_embeddings"]
            width = module.head_dim
            q = module.q_proj(hidden).view(1, hidden.shape[1], -1, width).transpose(1, 2)
            k = module.k_proj(hidden).view(1, hidden.shape[1], -1, width).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            found.append((q[0].double().numpy(), k[0].double().numpy()))
        handles.append(block.self_attn.register_forward_pre_hook(read, with_kwargs=True))
    try:
        with torch.no_grad():
            out = ref(torch.tensor([list(ids)]), output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    attentions = torch.stack(out.attentions)[:, 0].double().numpy()
    return attentions, found, out.logits[0].double().numpy()


def kv_of(n_head: int, n_kv_head: int) -> np.ndarray:
    """The key/value head of each query head, as transformers' repeat_kv lays them out."""
    return np.arange(n_head) // (n_head // n_kv_head)
