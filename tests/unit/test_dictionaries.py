"""Dictionaries in SAELens's format against SAELens itself: encode and decode of folders
SAELens writes (its own classes, random weights, its own save_model) equal SAELens's own
(1e-5); SAELens loads what mha-viz writes and computes the same; bad files are refused with a
message, before anything large is allocated."""

import json
import struct

import pytest
import torch

pytestmark = pytest.mark.unit

sae_lens = pytest.importorskip("sae_lens")

from mha_viz import DictionaryFileError, load_sae  # noqa: E402
from mha_viz.dictionaries import write_dictionary  # noqa: E402

D_HEAD, N_HEADS, D_SAE = 16, 4, 96


def saelens_dictionary(architecture, hook_name, d_in, seed=0, **settings):
    """One of SAELens's own inference dictionaries with every parameter random."""
    from sae_lens.saes.sae import SAEMetadata

    classes = {"standard": (sae_lens.StandardSAE, sae_lens.StandardSAEConfig),
               "jumprelu": (sae_lens.JumpReLUSAE, sae_lens.JumpReLUSAEConfig),
               "topk": (sae_lens.TopKSAE, sae_lens.TopKSAEConfig),
               "gated": (sae_lens.GatedSAE, sae_lens.GatedSAEConfig)}
    sae_class, cfg_class = classes[architecture]
    cfg = cfg_class(d_in=d_in, d_sae=D_SAE, metadata=SAEMetadata(hook_name=hook_name,
                                                                  model_name="random"),
                    **settings)
    sae = sae_class(cfg)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sae.named_parameters():
            values = torch.randn(param.shape, generator=generator) * 0.3
            if name == "threshold":
                values = values.abs() * 0.5
            param.copy_(values)
    return sae


CASES = {
    "standard, hook_z reshaped": ("standard", "blocks.1.attn.hook_z",
                                  dict(reshape_activations="hook_z")),
    "jumprelu, hook_z": ("jumprelu", "blocks.1.attn.hook_z", dict(reshape_activations="hook_z")),
    "topk, hook_z": ("topk", "blocks.0.attn.hook_z", dict(k=8, reshape_activations="hook_z")),
    "topk rescaled, residual": ("topk", "blocks.1.hook_resid_pre",
                                dict(k=5, rescale_acts_by_decoder_norm=True)),
    "standard, residual, no b_dec on input": ("standard", "blocks.1.hook_resid_post",
                                              dict(apply_b_dec_to_input=False)),
    "gated, mlp_out": ("gated", "blocks.0.hook_mlp_out", {}),
    "standard, layer_norm": ("standard", "blocks.1.hook_attn_out",
                             dict(normalize_activations="layer_norm")),
    "jumprelu, constant_norm_rescale": ("jumprelu", "blocks.1.hook_resid_pre",
                                        dict(normalize_activations="constant_norm_rescale")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_encode_and_decode_equal_saelens_on_folders_saelens_writes(case, tmp_path):
    architecture, hook, settings = CASES[case]
    d_in = N_HEADS * D_HEAD
    reference = saelens_dictionary(architecture, hook, d_in, **settings)
    reference.save_model(tmp_path)
    ours = load_sae(tmp_path)
    assert (ours.architecture, ours.hook_name, ours.d_sae, ours.d_in) == (
        architecture, hook, D_SAE, d_in)
    x = torch.randn(3, 7, d_in, generator=torch.Generator().manual_seed(1)) * 2 + 0.5
    shaped = x.view(3, 7, N_HEADS, D_HEAD) if settings.get("reshape_activations") else x
    with torch.no_grad():
        want_acts = reference.encode(shaped)
        want_out = reference.decode(want_acts).reshape(3, 7, d_in)
    acts = ours.encode(x)
    assert (acts > 0).sum() > 0 and (acts == 0).sum() > 0  # sparse, not dead: a real test
    torch.testing.assert_close(acts, want_acts, rtol=0, atol=1e-5)
    torch.testing.assert_close(ours.decode(acts, x), want_out, rtol=0, atol=1e-5)
    if settings.get("reshape_activations"):  # heads apart, as the engine keeps z
        torch.testing.assert_close(ours.encode(shaped), want_acts, rtol=0, atol=1e-5)


@pytest.mark.parametrize("case", ["topk, hook_z", "jumprelu, hook_z", "gated, mlp_out",
                                  "topk rescaled, residual"])
def test_saelens_loads_what_mha_viz_writes(case, tmp_path):
    architecture, hook, settings = CASES[case]
    d_in = N_HEADS * D_HEAD
    saelens_dictionary(architecture, hook, d_in, seed=3, **settings).save_model(tmp_path / "a")
    ours = load_sae(tmp_path / "a")
    ours.W_dec = ours.W_dec * 1.5  # a dictionary of our own, not the file SAELens wrote
    ours.metadata["model_name"] = "ours"
    write_dictionary(ours, tmp_path / "b")
    theirs = sae_lens.SAE.load_from_disk(str(tmp_path / "b"))
    assert type(theirs).__name__.lower().startswith(architecture)
    assert theirs.cfg.metadata.hook_name == hook and theirs.cfg.metadata.model_name == "ours"
    x = torch.randn(11, d_in, generator=torch.Generator().manual_seed(2))
    shaped = x.view(11, N_HEADS, D_HEAD) if settings.get("reshape_activations") else x
    with torch.no_grad():
        torch.testing.assert_close(theirs.encode(shaped), ours.encode(x), rtol=0, atol=1e-5)
        torch.testing.assert_close(theirs.decode(ours.encode(x)).reshape(11, d_in),
                                   ours.decode(ours.encode(x)), rtol=0, atol=1e-5)


def test_dtype_is_honoured(tmp_path):
    reference = saelens_dictionary("topk", "blocks.0.attn.hook_z", 64, k=4,
                                   reshape_activations="hook_z", dtype="bfloat16")
    reference.save_model(tmp_path)
    ours = load_sae(tmp_path)
    assert ours.dtype == torch.bfloat16
    x = torch.randn(5, 64)
    assert ours.encode(x).dtype == torch.bfloat16
    with torch.no_grad():
        torch.testing.assert_close(ours.encode(x), reference.encode(x.view(5, 4, 16)))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A small valid SAELens folder (written by SAELens) to damage, copy by copy."""
    folder = tmp_path_factory.mktemp("valid")
    saelens_dictionary("topk", "blocks.1.attn.hook_z", 64, k=4,
                       reshape_activations="hook_z").save_model(folder)
    return folder


def damaged(written, tmp_path, cfg=None, weights=None):
    cfg_text = (written / "cfg.json").read_text()
    data = (written / "sae_weights.safetensors").read_bytes()
    (tmp_path / "cfg.json").write_text(cfg(json.loads(cfg_text)) if cfg else cfg_text)
    (tmp_path / "sae_weights.safetensors").write_bytes(weights(data) if weights else data)
    return tmp_path


def edited(**changes):
    def edit(cfg):
        for key, value in changes.items():
            if key == "hook_name":
                cfg["metadata"]["hook_name"] = value
            else:
                cfg[key] = value
        return json.dumps(cfg)
    return edit


def with_nan(data: bytes) -> bytes:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    start = 8 + n + header["W_dec"]["data_offsets"][0]
    return data[:start] + struct.pack("<f", float("nan")) + data[start + 4:]


@pytest.mark.parametrize("change, words", [
    (dict(cfg=edited(architecture="transcoder")), "architecture 'transcoder'"),
    (dict(cfg=edited(architecture="matching_pursuit")), "not one mha-viz computes"),
    (dict(cfg=edited(normalize_activations="expected_average_only_in")),
     "expected_average_only_in"),
    (dict(cfg=edited(normalize_activations="covariance_whitening")), "covariance_whitening"),
    (dict(cfg=edited(d_sae=10**9)), "more than the"),
    (dict(cfg=edited(k=0)), "k must be"),
    (dict(cfg=edited(hook_name="blocks.1.hook_q")), "a site mha-viz does not compute"),
    (dict(cfg=edited(dtype="int8")), "dtype"),
    (dict(cfg=lambda cfg: "{not json"), "not JSON"),
    (dict(cfg=lambda cfg: "[1, 2]"), "not a JSON object"),
    (dict(cfg=lambda cfg: json.dumps(cfg) + " " * (50 << 20)), "more than the"),
    (dict(weights=lambda data: data[:len(data) // 2]), "unreadable"),
    (dict(weights=lambda data: data[:5]), "unreadable"),
    (dict(weights=lambda data: b"\xff" * 64), "unreadable"),
    (dict(weights=with_nan), "NaN"),
    (dict(cfg=edited(d_in=32)), "shape"),
])
def test_bad_files_get_a_clear_message(written, tmp_path, change, words):
    folder = damaged(written, tmp_path, **change)
    with pytest.raises(DictionaryFileError, match=None) as caught:
        load_sae(folder)
    assert words in str(caught.value)
    assert "Traceback" not in str(caught.value)


def test_a_dictionary_of_another_model_is_refused(written, gpt2_model):
    sae = load_sae(written)
    sae.check_model(gpt2_model)  # 4 heads of 16 at layer 1: it fits this one
    assert sae.site == "hook_z" and sae.layer == 1
    import copy
    other = copy.copy(sae)
    other.layer = 7
    with pytest.raises(DictionaryFileError, match="has 2 layers: it is a dictionary of another"):
        other.check_model(gpt2_model)
    other = copy.copy(sae)
    other.W_enc, other.W_dec = sae.W_enc[:48], sae.W_dec[:, :48]
    with pytest.raises(DictionaryFileError, match="4 heads of 16 = 64"):
        other.check_model(gpt2_model)


def test_unknown_names_and_missing_saelens_say_what_to_do(monkeypatch, tmp_path):
    with pytest.raises(DictionaryFileError, match="neither a bundled dictionary"):
        load_sae(tmp_path / "nothing-here")
    import builtins
    real_import = builtins.__import__

    def no_saelens(name, *args, **kwargs):
        if name.startswith("sae_lens"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_saelens)
    with pytest.raises(DictionaryFileError, match="pip install sae-lens"):
        load_sae("gpt2-small-hook-z-kk:blocks.1.hook_z")
