"""load_sae: a bundled dictionary by its name, a SAELens folder on disk, or a named SAELens
release (through the optional SAELens package, when it is installed and the hub answers)."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import DictionaryFileError, NotAllowedError
from .files import CFG_FILE, dictionary_from, read_dictionary, settings_of
from .sae import SparseDictionary

BUNDLED_ROOT = Path(__file__).resolve().parents[1] / "bundled"
SAELENS_PIN = "sae-lens==6.54.12"


REFUSED_FOLDER = ("that is not a dictionary folder this server offers. Dictionaries are read "
                  "only from the folders its operator allows (MHA_VIZ_ALLOWED_DIRS; by default "
                  "the Hugging Face cache and the app's models folder)")


def bundled_saes(model_name: str | None = None) -> dict[str, Path]:
    """The dictionaries shipped beside their model's files, by name: "<model>/<folder>"
    (mha_viz/bundled/<model>/saes/<folder>/cfg.json), e.g. "induction-toy/L1.hook_z";
    model_name: only that bundled model's ("induction-toy")."""
    found = {}
    for cfg in sorted(BUNDLED_ROOT.glob(f"*/saes/*/{CFG_FILE}")):
        folder = cfg.parent
        if model_name is None or folder.parent.parent.name == model_name:
            found[f"{folder.parent.parent.name}/{folder.name}"] = folder
    return found


def _folder_for_visitor(text: str, local_dirs: list[Path]) -> Path:
    """The folder, when it lies inside one of local_dirs; otherwise one message for every
    case (outside, missing, a file, unreadable, a loop, too long a name), so that a visitor
    learns nothing about the server's files from it."""
    try:
        if not text:
            raise ValueError("no folder")
        real = Path(text).resolve(strict=True)
        roots = [Path(d).resolve() for d in local_dirs]
        usable = real.is_dir() and any(real == root or root in real.parents for root in roots)
    except (OSError, RuntimeError, ValueError):  # missing, too long, a symlink loop, a NUL
        usable = False
    if not usable:
        raise NotAllowedError(REFUSED_FOLDER)
    return real


def load_sae(path_or_name, model=None, local_dirs=None) -> SparseDictionary:
    """A dictionary in SAELens's format: a bundled name (bundled_saes()), a folder holding
    cfg.json and sae_weights.safetensors, or "release:sae_id" of SAELens's pretrained
    releases (needs the SAELens package and the hub). model: checked against it (its
    layer, width and heads at the dictionary's site). local_dirs (the app, for its
    visitors): a bundled name, or a folder inside one of these folders; nothing else
    (NotAllowedError, one message whatever the reason)."""
    text = str(path_or_name).strip()
    bundled = bundled_saes()
    if text in bundled:
        sae = read_dictionary(bundled[text], f"the bundled dictionary '{text}'")
    elif local_dirs is not None:
        folder = _folder_for_visitor(text, local_dirs)
        sae = read_dictionary(folder, f"'{folder.name}'")
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
