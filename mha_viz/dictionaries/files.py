"""SAELens's on-disk format, read and written: a folder holding cfg.json and
sae_weights.safetensors (SAELens's SAE.save_model and SAE.load_from_disk).

Reading checks before it allocates: cfg.json's size (MAX_CFG_BYTES), its architecture and
settings (what mha-viz does not compute is refused by name), the weights' bytes from the
config's widths against the memory budget (core/budget.py), then the safetensors header
against the file's size (checkpoints.weights: a truncated file is refused before a tensor is
read), every tensor's name, dtype and shape against the config, and every number finite.
Nothing is unpickled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch

from ..checkpoints.weights import open_safetensors
from ..core.errors import CorruptCheckpointError, DictionaryFileError
from .sae import ARCHITECTURES, DTYPES, NORMALIZATIONS, SparseDictionary
from .sites import site_of

CFG_FILE = "cfg.json"
WEIGHTS_FILE = "sae_weights.safetensors"
MAX_CFG_BYTES = 1 << 20  # SAELens's configs are a few kB; a larger one is not a config
# The SAELens release whose format files are written in (its loader reads a config without
# a version as a pre-6.0 one, and rewrites it).
SAELENS_FORMAT_VERSION = "6.54.12"
REFUSED_NORMALIZATIONS = {
    "expected_average_only_in": "it scales inputs by a constant SAELens keeps outside the "
                                "file (fold it into the weights with SAELens's "
                                "fold_activation_norm_scaling_factor and save again)",
    "covariance_whitening": "it whitens inputs with matrices the file does not hold (fold "
                            "them with SAELens's fold_activation_whitening and save again)",
}
# tensors each architecture reads, beside W_enc [d_in, d_sae], W_dec [d_sae, d_in], b_dec [d_in]
PER_FEATURE = {"standard": ("b_enc",), "topk": ("b_enc",), "jumprelu": ("b_enc", "threshold"),
               "gated": ("b_gate", "b_mag", "r_mag")}


def _refuse(source: str, why: str) -> DictionaryFileError:
    return DictionaryFileError(f"{source}: {why}")


def read_cfg(folder: Path, source: str) -> dict:
    """cfg.json as a dict, refused when missing, larger than MAX_CFG_BYTES or not a JSON
    object."""
    path = folder / CFG_FILE
    if not path.is_file():
        raise _refuse(source, f"no {CFG_FILE} (a SAELens dictionary folder holds {CFG_FILE} "
                              f"and {WEIGHTS_FILE})")
    size = path.stat().st_size
    if size > MAX_CFG_BYTES:
        raise _refuse(source, f"{CFG_FILE} is {size:,} bytes, more than the {MAX_CFG_BYTES:,} "
                              f"a dictionary's config may take")
    try:
        cfg = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise _refuse(source, f"{CFG_FILE} is not JSON") from None
    if not isinstance(cfg, dict):
        raise _refuse(source, f"{CFG_FILE} is not a JSON object")
    return cfg


def _whole(cfg: dict, name: str, source: str, low: int = 1) -> int:
    value = cfg.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _refuse(source, f"{CFG_FILE}'s {name} must be a whole number of at least {low}, "
                              f"got {str(value)[:40]!r}")
    return value


def settings_of(cfg: dict, source: str) -> dict:
    """The settings SparseDictionary needs, read and checked from a SAELens config (6.x, or
    the older flat one: hook_name/hook_point at the top, activation_fn "topk")."""
    metadata = cfg.get("metadata") if isinstance(cfg.get("metadata"), dict) else {}
    architecture = cfg.get("architecture", "standard")
    kwargs = cfg.get("activation_fn_kwargs") if isinstance(
        cfg.get("activation_fn_kwargs"), dict) else {}
    if "architecture" not in cfg and cfg.get("activation_fn") == "topk":
        architecture = "topk"
    if architecture not in ARCHITECTURES:
        raise _refuse(source, f"its architecture {str(architecture)[:40]!r} is not one "
                              f"mha-viz computes ({', '.join(ARCHITECTURES)})")
    d_in, d_sae = _whole(cfg, "d_in", source), _whole(cfg, "d_sae", source)
    normalize = cfg.get("normalize_activations", "none")
    normalize = {None: "none", False: "none", True: "expected_average_only_in"}.get(
        normalize, normalize) if not isinstance(normalize, str) else normalize
    if normalize in REFUSED_NORMALIZATIONS:
        raise _refuse(source, f"normalize_activations is {normalize!r}, which mha-viz does "
                              f"not compute: {REFUSED_NORMALIZATIONS[normalize]}")
    if normalize not in NORMALIZATIONS:
        raise _refuse(source, f"normalize_activations {str(normalize)[:40]!r} is unknown "
                              f"(mha-viz computes {', '.join(NORMALIZATIONS)})")
    dtype_name = str(cfg.get("dtype", "float32")).removeprefix("torch.")
    if dtype_name not in DTYPES:
        raise _refuse(source, f"its dtype {dtype_name[:40]!r} is not one of "
                              f"{', '.join(DTYPES)}")
    hook = metadata.get("hook_name") or cfg.get("hook_name") or cfg.get("hook_point")
    site, layer = site_of(hook)
    head = metadata.get("hook_head_index", cfg.get("hook_head_index"))
    if head is not None:
        raise _refuse(source, f"it reads one head ({hook} head {head}); mha-viz reads "
                              f"dictionaries of every head of a layer")
    reshape = cfg.get("reshape_activations", "hook_z" if site == "hook_z" else "none")
    if reshape not in ("none", "hook_z") or (reshape == "hook_z" and site != "hook_z"):
        raise _refuse(source, f"reshape_activations {str(reshape)[:40]!r} does not fit its "
                              f"site {hook}")
    k = None
    if architecture == "topk":
        k = cfg.get("k", kwargs.get("k"))
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= d_sae:
            raise _refuse(source, f"a topk dictionary's k must be 1..d_sae ({d_sae}), got "
                                  f"{str(k)[:40]!r}")
    model_name = metadata.get("model_name") or cfg.get("model_name")
    return dict(architecture=architecture, d_in=d_in, d_sae=d_sae, dtype=DTYPES[dtype_name],
                hook_name=hook, site=site, layer=layer, k=k, reshape_activations=reshape,
                rescale_acts_by_decoder_norm=bool(cfg.get("rescale_acts_by_decoder_norm",
                                                          False)),
                apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", True)),
                normalize_activations=normalize,
                metadata={**metadata, "hook_name": hook,
                          **({"model_name": model_name} if model_name else {})})


def expected_shapes(settings: dict) -> dict[str, tuple[int, ...]]:
    d_in, d_sae = settings["d_in"], settings["d_sae"]
    shapes = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    shapes.update({name: (d_sae,) for name in PER_FEATURE[settings["architecture"]]})
    return shapes


def check_budget(settings: dict, source: str) -> None:
    """Refuse, from the config's widths alone, a dictionary whose weights would take more
    than one input's share of the memory budget."""
    from ..core.budget import ONE_INPUT_SHARE, budget_bytes, size_text

    numbers = sum(_count(shape) for shape in expected_shapes(settings).values())
    need = numbers * settings["dtype"].itemsize
    allowed = ONE_INPUT_SHARE * budget_bytes()
    if need > allowed:
        raise _refuse(source, f"its weights ({settings['d_sae']:,} features of "
                              f"{settings['d_in']:,}) take {size_text(need)}, more than the "
                              f"{size_text(allowed)} this server keeps for one dictionary "
                              f"(MHA_VIZ_MEMORY_MB raises the budget)")


def _count(shape) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def dictionary_from(settings: dict, tensors: Mapping[str, torch.Tensor], source: str
                    ) -> SparseDictionary:
    """A SparseDictionary from checked settings and a mapping of tensors (read lazily: each
    is read once), each checked for its shape, a floating dtype and finite numbers, and
    held in the config's dtype as SAELens holds it."""
    if "threshold" not in tensors and "log_threshold" in tensors:  # older JumpReLU files
        tensors = {**{k: tensors[k] for k in tensors if k != "log_threshold"},
                   "threshold": torch.exp(tensors["log_threshold"].to(torch.float64))}
    scaling = "scaling_factor" if "scaling_factor" in tensors else "finetuning_scaling_factor"
    if scaling in tensors and not torch.all(tensors[scaling].to(torch.float64) == 1):
        raise _refuse(source, f"it holds a {scaling} other than 1, which mha-viz does not "
                              f"compute (fold it into W_dec and save again)")
    held = {}
    for name, shape in expected_shapes(settings).items():
        if name not in tensors:
            raise _refuse(source, f"{WEIGHTS_FILE} lacks the tensor {name}")
        tensor = tensors[name]
        if tuple(tensor.shape) != shape:
            raise _refuse(source, f"{name} has shape {list(tensor.shape)}, but its config "
                                  f"says {list(shape)}")
        if not tensor.dtype.is_floating_point:
            raise _refuse(source, f"{name} holds {tensor.dtype} numbers, not floating point")
        tensor = tensor.to(settings["dtype"])
        if not torch.isfinite(tensor).all():
            raise _refuse(source, f"{name} holds NaN or infinite numbers")
        held[name] = tensor
    if settings["architecture"] == "topk" and settings["rescale_acts_by_decoder_norm"] \
            and not (held["W_dec"].norm(dim=-1) > 0).all():
        raise _refuse(source, "a decoder row is zero, which rescale_acts_by_decoder_norm "
                              "divides by")
    return SparseDictionary(
        architecture=settings["architecture"], W_enc=held["W_enc"], W_dec=held["W_dec"],
        b_dec=held["b_dec"], b_enc=held.get("b_enc"), hook_name=settings["hook_name"],
        site=settings["site"], layer=settings["layer"], threshold=held.get("threshold"),
        b_gate=held.get("b_gate"), b_mag=held.get("b_mag"), r_mag=held.get("r_mag"),
        k=settings["k"], rescale_acts_by_decoder_norm=settings["rescale_acts_by_decoder_norm"],
        apply_b_dec_to_input=settings["apply_b_dec_to_input"],
        normalize_activations=settings["normalize_activations"],
        reshape_activations=settings["reshape_activations"], metadata=settings["metadata"],
        source=source)


def read_dictionary(folder: Path, source: str) -> SparseDictionary:
    """A SAELens folder (cfg.json + sae_weights.safetensors) read and checked (see the
    module docstring)."""
    settings = settings_of(read_cfg(folder, source), source)
    check_budget(settings, source)
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        raise _refuse(source, f"no {WEIGHTS_FILE} beside its {CFG_FILE}")
    try:
        sae = dictionary_from(settings, open_safetensors(path), source)
        sae.folder = folder
        return sae
    except CorruptCheckpointError as error:
        raise _refuse(source, f"{WEIGHTS_FILE} is unreadable ({str(error)[:200]})") from None


def config_of(sae: SparseDictionary) -> dict:
    """cfg.json as SAELens writes it (SAEConfig.to_dict) for this dictionary."""
    dtype = next(name for name, value in DTYPES.items() if value == sae.dtype)
    cfg = {"d_in": sae.d_in, "d_sae": sae.d_sae, "dtype": dtype, "device": "cpu",
           "apply_b_dec_to_input": sae.apply_b_dec_to_input,
           "normalize_activations": sae.normalize_activations,
           "reshape_activations": sae.reshape_activations,
           "metadata": {"sae_lens_version": SAELENS_FORMAT_VERSION,
                        "sae_lens_training_version": SAELENS_FORMAT_VERSION,
                        **sae.metadata, "hook_name": sae.hook_name}}
    if sae.architecture == "topk":
        cfg.update(k=sae.k, rescale_acts_by_decoder_norm=sae.rescale_acts_by_decoder_norm)
    cfg["architecture"] = sae.architecture
    return cfg


def write_dictionary(sae: SparseDictionary, folder) -> Path:
    """Write the dictionary in SAELens's format (what SAE.load_from_disk reads) -> folder."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = ("W_enc", "W_dec", "b_dec") + PER_FEATURE[sae.architecture]
    save_file({name: getattr(sae, name).contiguous() for name in names},
              str(folder / WEIGHTS_FILE))
    (folder / CFG_FILE).write_text(json.dumps(config_of(sae), indent=1))
    return folder
