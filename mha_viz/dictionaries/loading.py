"""load_sae: a bundled dictionary by its name, a SAELens folder on disk, or a named SAELens
release (through the optional SAELens package, when it is installed and the hub answers)."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import DictionaryFileError
from .files import CFG_FILE, dictionary_from, read_dictionary, settings_of
from .sae import SparseDictionary

BUNDLED_ROOT = Path(__file__).resolve().parents[1] / "bundled"
SAELENS_PIN = "sae-lens==6.54.12"


def bundled_saes() -> dict[str, Path]:
    """The dictionaries shipped beside their model's files, by name: "<model>/<folder>"
    (mha_viz/bundled/<model>/saes/<folder>/cfg.json), e.g. "induction-toy/L1.hook_z"."""
    found = {}
    for cfg in sorted(BUNDLED_ROOT.glob(f"*/saes/*/{CFG_FILE}")):
        folder = cfg.parent
        found[f"{folder.parent.parent.name}/{folder.name}"] = folder
    return found


def load_sae(path_or_name, model=None) -> SparseDictionary:
    """A dictionary in SAELens's format: a bundled name (bundled_saes()), a folder holding
    cfg.json and sae_weights.safetensors, or "release:sae_id" of SAELens's pretrained
    releases (needs the SAELens package and the hub). model: checked against it (its
    layer, width and heads at the dictionary's site)."""
    text = str(path_or_name).strip()
    bundled = bundled_saes()
    if text in bundled:
        sae = read_dictionary(bundled[text], f"the bundled dictionary '{text}'")
    elif Path(text).expanduser().is_dir():
        folder = Path(text).expanduser()
        sae = read_dictionary(folder, f"'{folder.name}'")
    elif ":" in text and not Path(text).expanduser().exists():
        sae = _from_release(*text.split(":", 1))
    else:
        raise DictionaryFileError(
            f"'{text[:120]}' is neither a bundled dictionary ({', '.join(bundled) or 'none'}), "
            f"nor a folder holding {CFG_FILE}, nor 'release:sae_id' of SAELens's releases")
    if model is not None:
        sae.check_model(model)
    return sae


def _from_release(release: str, sae_id: str) -> SparseDictionary:
    """A named SAELens release, downloaded and read by SAELens itself, then checked here as
    a file is."""
    try:
        from sae_lens import SAE
    except ImportError:
        raise DictionaryFileError(
            f"named releases ('{release}:{sae_id}') load through SAELens, which is not "
            f"installed: pip install {SAELENS_PIN} (or give a folder holding {CFG_FILE})"
        ) from None
    source = f"SAELens's release '{release}', '{sae_id}'"
    try:
        sae = SAE.from_pretrained(release, sae_id, device="cpu")
    except (OSError, ConnectionError) as error:
        raise DictionaryFileError(f"{source} could not be downloaded ({str(error)[:160]}): "
                                  f"the hub may be unreachable from here") from None
    except (KeyError, ValueError) as error:
        raise DictionaryFileError(f"{source} is not one SAELens knows "
                                  f"({str(error)[:160]})") from None
    cfg = sae.cfg.to_dict()
    return dictionary_from(settings_of(cfg, source), dict(sae.state_dict()), source)
