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
    # in the dtype the model is held in (issue 57 item 6: the lesson counted 2 bytes a
    # number while the model was held in float32)
    held = sum(t.numel() * t.element_size() for t in hooks.captured.values())
    info = model.info
    assert info.bytes_per_value == 4 == next(iter(hooks.captured.values())).element_size()
    assert kv_cache_bytes(info.n_layer, info.n_kv_head, info.d_head, len(ids),
                          info.bytes_per_value) == held
    assert kv_cache_bytes(info.n_layer, info.n_kv_head, info.d_head, len(ids)) == held // 2
    sizes = kv_cache_by_sharing(info, len(ids))
    assert list(sizes.values()) == [2 * held, held, held // 2]  # 4, 2 and 1 K/V heads
    assert "grouped-query (2 K/V heads)" in list(sizes)[1]
    assert bytes_text(3 * 2 ** 20) == "3.0 MiB" and bytes_text(12) == "12 B"
    with pytest.raises(InputError, match="whole numbers"):
        kv_cache_bytes(2, -1, 64, 10)


def test_what_the_cache_holds_while_the_last_token_is_written():
    """Past tokens: K and V cached, Q not kept; the token being written: all three computed."""
    from mha_viz.analysis.one_head.kv_cache_size import CACHED, COMPUTED_NOW, NOT_KEPT, cache_roles

    roles = cache_roles(5)
    assert roles.shape == (3, 5)
    assert (roles[0, :4] == NOT_KEPT).all() and (roles[1:, :4] == CACHED).all()
    assert (roles[:, 4] == COMPUTED_NOW).all()
    with pytest.raises(InputError):
        cache_roles(0)
