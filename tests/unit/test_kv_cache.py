"""The KV cache (issue 28): its size equals the keys and values a grouped-query Llama
actually computes (captured at the engine's k and v points, counted in 16-bit numbers), and
the Home page's model card shows it for multi-head, the model's own sharing and multi-query
attention."""

from __future__ import annotations

import pytest

from mha_viz import InputError, load_model
from mha_viz.analysis.one_head.kv_cache_size import bytes_text, kv_cache_by_sharing, kv_cache_bytes
from mha_viz.engine.interventions import Interventions, run_with_hooks


def test_the_size_equals_the_keys_and_values_a_forward_computes(tmp_path):
    import torch

    from mha_viz.testing import make_llama_checkpoint

    model = load_model(make_llama_checkpoint(tmp_path, n_layer=3, n_head=4, n_kv_head=2,
                                             d_model=64))
    ids = model.encode("The cat sat on the mat because it was warm.").input_ids
    hooks = Interventions(capture=["k", "v"])
    with torch.inference_mode():
        run_with_hooks(model.network, torch.tensor([ids]), hooks)
    held = sum(t.numel() * 2 for t in hooks.captured.values())  # 16-bit numbers
    info = model.info
    assert kv_cache_bytes(info.n_layer, info.n_kv_head, info.d_head, len(ids)) == held
    sizes = kv_cache_by_sharing(info, len(ids))
    assert list(sizes.values()) == [2 * held, held, held // 2]  # 4, 2 and 1 K/V heads
    assert "grouped-query (2 K/V heads)" in list(sizes)[1]
    assert bytes_text(3 * 2 ** 20) == "3.0 MiB" and bytes_text(12) == "12 B"
    with pytest.raises(InputError, match="whole numbers"):
        kv_cache_bytes(2, -1, 64, 10)
