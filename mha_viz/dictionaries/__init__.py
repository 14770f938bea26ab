"""Layer 3, dictionaries: sparse dictionaries (sparse autoencoders) in SAELens's on-disk
format: reading them safely (files), their encode and decode as SAELens computes them (sae),
where they read in a model (sites: the hook name's site and layer, checked against a
model), and loading one by name (loading: bundled, a folder, a SAELens release). The
analyses that read a model through them are in analysis/features/.

May import: core, checkpoints.

    from mha_viz import load_sae
    sae = load_sae("induction-toy/L1.hook_z")      # bundled; or a folder; or "release:sae_id"
    acts = sae.encode(z)                           # [..., d_sae]; z [..., n_head * d_head]
    sae.decode(acts)                               # [..., d_in]
    sae.site, sae.layer, sae.d_sae                 # "hook_z", 1, 256
"""

from .files import CFG_FILE, WEIGHTS_FILE, read_dictionary, write_dictionary
from .loading import bundled_saes, load_sae
from .sae import ARCHITECTURES, SparseDictionary
from .sites import SITES, check_site, hook_name_of, site_of, site_width

__all__ = ["CFG_FILE", "WEIGHTS_FILE", "read_dictionary", "write_dictionary", "bundled_saes",
           "load_sae", "ARCHITECTURES", "SparseDictionary", "SITES", "check_site",
           "hook_name_of", "site_of", "site_width"]
