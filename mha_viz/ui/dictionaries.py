"""The dictionaries (sparse autoencoders) the pages read for a model: the bundled ones of the
sidebar's model that fit it, and the SAELens folder this session opened from the Features
page's sidebar, read only inside the folders the server allows (as local checkpoints are:
MHA_VIZ_ALLOWED_DIRS). Each is read once (memo, shared by the sessions) and checked against
the model; what cannot be read gets the library's message, never a path of the server."""

from __future__ import annotations

from dataclasses import dataclass

from .. import checkpoints
from ..core.errors import MhaVizError
from ..dictionaries import SparseDictionary, bundled_saes, load_sae
from .selection import Selection
from .stores import memo
from .settings import APP_DIR
from .state import get_value

FOLDER = "folder"  # the picker's "a SAELens folder…" entry, and its folder's synced name
FOLDER_NAME = "saedir"  # the folder's synced name (the URL's ?saedir=)
CHOICE_NAME = "sae"  # the picker's synced name (the URL's ?sae=)


@dataclass(frozen=True)
class Dictionary:
    """A dictionary the page may read: its name in the picker (a bundled name, or FOLDER)
    and the dictionary, checked against the model."""
    name: str
    sae: SparseDictionary

    def reads(self, site: str, layer: int) -> bool:
        """Whether it reads `site` ("hook_z", or "residual": the stream entering `layer`)
        at `layer`."""
        if site == "residual":
            return ((self.sae.site == "resid_pre" and self.sae.layer == layer)
                    or (self.sae.site == "resid_post" and self.sae.layer == layer - 1))
        return self.sae.site == site and self.sae.layer == layer


def load_dictionary(name_or_folder: str, model) -> SparseDictionary:
    """A bundled dictionary by name, or a folder inside the allowed folders (load_sae's
    local_dirs), read once and checked against the model (DictionaryFileError: of another
    model; NotAllowedError: not a folder this server offers)."""
    allowed = checkpoints.allowed_dirs(APP_DIR / "models")
    sae = memo(load_sae, str(name_or_folder).strip(), local_dirs=allowed)
    sae.check_model(model)
    return sae


def bundled_for(selection: Selection) -> list[Dictionary]:
    """The bundled dictionaries of the sidebar's model that fit it, in name order."""
    if selection.model is None:
        return []
    found = []
    for name in bundled_saes(selection.model_name):
        try:
            found.append(Dictionary(name, load_dictionary(name, selection.model)))
        except MhaVizError:  # a bundled file that does not fit: not offered
            continue
    return found


def opened_folder(selection: Selection) -> Dictionary | None:
    """The folder this session opened on the Features page, when it is one this server
    allows and a dictionary of this model (else None: the Features page says why)."""
    folder = str(get_value(FOLDER_NAME) or "").strip()
    if selection.model is None or not folder or get_value(CHOICE_NAME) != FOLDER:
        return None
    try:
        return Dictionary(FOLDER, load_dictionary(folder, selection.model))
    except MhaVizError:
        return None


def residual_for(selection: Selection, layer: int) -> Dictionary | None:
    """A dictionary of the stream entering `layer` (resid_pre of it, or resid_post of the
    layer before): the session's opened folder first, then the bundled ones; None when
    there is none (the why panel then offers no features view)."""
    candidates = [opened_folder(selection), *bundled_for(selection)]
    return next((d for d in candidates if d is not None and d.reads("residual", layer)), None)
