"""Where a dictionary reads: its site and layer, from the TransformerLens hook name SAELens
records ("blocks.1.attn.hook_z"), and the check that a model has that site at that width."""

from __future__ import annotations

import re

from ..core.errors import DictionaryFileError

# site -> (the hook name's tail after "blocks.{layer}.", the engine's activation point)
SITES = {
    "hook_z": ("attn.hook_z", "z"),  # each head's output before W_O, heads concatenated
    "attn_out": ("hook_attn_out", "attn_out"),
    "resid_pre": ("hook_resid_pre", "resid_pre"),
    "resid_post": ("hook_resid_post", "resid_post"),
    "mlp_out": ("hook_mlp_out", "mlp_out"),
}
_HOOK = re.compile(r"^blocks\.(\d{1,4})\.(.+)$")
_BY_TAIL = {tail: site for site, (tail, _) in SITES.items()}


def site_of(hook_name) -> tuple[str, int]:
    """"blocks.1.attn.hook_z" -> ("hook_z", 1); DictionaryFileError for any other form."""
    found = _HOOK.match(hook_name) if isinstance(hook_name, str) else None
    if found is None or found.group(2) not in _BY_TAIL:
        shown = repr(hook_name)[:80]
        raise DictionaryFileError(
            f"the dictionary reads {shown}, a site mha-viz does not compute: it reads "
            f"{', '.join(f'blocks.L.{tail}' for tail, _ in SITES.values())}")
    return _BY_TAIL[found.group(2)], int(found.group(1))


def hook_name_of(site: str, layer: int) -> str:
    """("hook_z", 1) -> "blocks.1.attn.hook_z" (SAELens's and TransformerLens's name)."""
    check_site(site)
    return f"blocks.{int(layer)}.{SITES[site][0]}"


def check_site(site) -> str:
    if site not in SITES:
        raise DictionaryFileError(f"site must be one of {', '.join(SITES)}, got {site!r}")
    return site


def site_width(info, site: str) -> int:
    """The width of a site on a model: n_head x d_head for hook_z, d_model otherwise."""
    return info.n_head * info.d_head if site == "hook_z" else info.d_model


def check_fits_model(dictionary, model) -> None:
    """DictionaryFileError when the dictionary's layer, width (or head count) do not fit the
    model: a dictionary trained on another model says so."""
    info = model.info
    if getattr(info, "encoder_decoder", False):
        raise DictionaryFileError("dictionaries read a decoder-only or encoder-only stack; "
                                  "this model is an encoder-decoder")
    trained_on = dictionary.model_name
    hint = f" (it was trained on {trained_on!r})" if trained_on else ""
    if dictionary.layer >= info.n_layer:
        raise DictionaryFileError(
            f"the dictionary reads layer {dictionary.layer}, but {info.name} has "
            f"{info.n_layer} layers: it is a dictionary of another model{hint}")
    width = site_width(info, dictionary.site)
    if dictionary.d_in != width:
        what = (f"{info.n_head} heads of {info.d_head} = {width}" if dictionary.site == "hook_z"
                else f"a residual width of {width}")
        raise DictionaryFileError(
            f"the dictionary reads {dictionary.d_in} numbers at {dictionary.hook_name}, but "
            f"{info.name} has {what} there: it is a dictionary of another model{hint}")
