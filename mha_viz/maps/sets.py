"""The named sets of a model's attention maps. A model of one stack has one set, its
self-attention; an encoder-decoder has three: the encoder's self-attention (source tokens
read source tokens), the decoder's (target tokens read earlier target tokens) and
cross-attention (target tokens read the source), and an image reader's the same three, its
source an image's strips. A set says whose tokens ask (the maps' rows), whose answer (their
columns) and which stack's layers hold it; ``Model.map_sets`` says which sets a model has,
and a page says which sets it reads (ui's views), so neither branches on a kind's name.

    from mha_viz.maps.sets import map_set
    map_set("cross").square        # False: target x source
    map_set("cross").stack         # "decoder": cross-attention sits in the decoder's layers
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import InputError


@dataclass(frozen=True)
class MapSet:
    """One named set of attention maps: ``name`` as the library and a link name it, ``label``
    as a reader is told, ``stack`` the stack whose layers (and query positions) hold it ("" for
    a model of one stack), ``queries`` and ``keys`` whose tokens ask and answer."""
    name: str
    label: str
    stack: str
    queries: str
    keys: str

    @property
    def square(self) -> bool:
        """Self-attention: its queries and keys are the same tokens (a T x T map)."""
        return self.queries == self.keys


SELF = MapSet("self", "self-attention", "", "tokens", "tokens")
ENCODER = MapSet("encoder", "encoder self-attention", "encoder", "source", "source")
DECODER = MapSet("decoder", "decoder self-attention", "decoder", "target", "target")
CROSS = MapSet("cross", "cross-attention", "decoder", "target", "source")
ONE_STACK = (SELF,)
ENCODER_DECODER = (ENCODER, DECODER, CROSS)
BY_NAME = {s.name: s for s in (*ONE_STACK, *ENCODER_DECODER)}


def map_set(name: str | None) -> MapSet:
    """The set named ``name`` ("self", "encoder", "decoder", "cross"; None: "self")."""
    found = BY_NAME.get("self" if name is None else name)
    if found is None:
        raise InputError(f"a set of attention maps is one of {', '.join(BY_NAME)}, got "
                         f"{name!r}")
    return found
