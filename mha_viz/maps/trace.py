"""AttentionTrace: every head's attention map for one input, plus what a reader needs to read it."""

from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.digest import digest
from ..core.errors import TraceFileError
from ..core.text import visible
from . import ondemand
from .forms import Maps
from .held import HeldMaps
from .trace_file import (ARRAYS, DEFAULT_MAX_TRACE_BYTES, check_maps, check_queries_keys,
                         check_value_norms, meaning_read, read_members, special_tokens_read)
from .value_weighted import check_weights

# 2: what made the maps in typed keys (weights, head_mask, ..., kept_positions); version 1
# files kept them in one "extra" dict, which load() still reads
FORMAT_VERSION = 2
# trace.attentions of an on-demand trace computes every map at once up to this size; past it
# it says to ask for heads, layers or rows instead.
MATERIALISE_MAX_BYTES = 1 << 30
# maps="auto" holds every map while they take at most this; longer inputs get on-demand maps.
AUTO_FULL_MAPS_BYTES = MATERIALISE_MAX_BYTES


@dataclass(eq=False)
class AttentionTrace:
    """What the model computed for one input.

    attentions[l, h, i, j] is the weight that query position i of head h in layer l gives to
    key position j, exactly as the softmax produced it (rows sum to 1; for causal models the
    upper triangle is 0). Layers and heads are numbered from 0.

    The maps are one of the forms of maps.forms.Maps, held in `maps`: held whole (float32
    [L, H, T, T]: fastest for short inputs) or, for long inputs, computed on demand from what
    rebuilds them (memory grows with T, not T squared). The trace hands every read to its
    maps, whichever form they take: head_map, layer_maps, rows, gather_rows, row_blocks and
    block_mean give the same numbers; `attentions` of an on-demand trace computes them all,
    when they fit in MATERIALISE_MAX_BYTES, and otherwise raises MapsTooLargeError saying so.

    What made the maps is in typed fields (weights, head_mask and ablation, n_chars_given,
    prompt_length, attention_kind, kept_positions), each None or its default when it does
    not apply.
    """

    tokens: list[str]  # as the tokenizer names them ("Ġthe", "##ing", "[CLS]")
    token_ids: list[int]
    attentions: np.ndarray = field(repr=False)  # float32 [L, H, T, T], or a forms.Maps
    display_tokens: list[str]  # readable labels: the token's own text, spaces shown as "␣"
    special_mask: np.ndarray  # bool [T]: [CLS], [SEP], <|endoftext|>, ... positions
    segment_ids: np.ndarray  # int [T]: 0 for sentence A, 1 for sentence B (BERT pairs)
    causal: bool  # True for causal models (GPT-2, Llama): query i only sees keys 0..i
    truncated: bool = False  # the text was longer than the model's context
    n_tokens_before_truncation: int = 0  # token count the full text would have had
    model_name: str = ""
    model_type: str = ""
    text: str = ""
    text_pair: str | None = None
    # kv_heads[h]: the key/value head query head h reads. Heads that share one read the same
    # keys and values (grouped- or multi-query attention); None means every head has its own.
    kv_heads: list[int] | None = None
    # what made these maps, named by core.digest: the model that traced the text
    # (Model.trace), the file's content (load), the encoder-decoder trace (as_trace); "" for
    # a trace built by hand, which identity() then names by its maps
    origin: str = field(default="", repr=False)
    # the tokenizer's special tokens by role ({"cls": "[CLS]", "sep": "[SEP]"}, {"bos": ...}:
    # models.tokens.SPECIAL_ROLES), so an analysis asks for a role, never a family's token
    special_tokens: dict[str, str] = field(default_factory=dict)
    # --- what made the maps (saved with them; part of the trace's identity) ---
    # what the rows are: "attention" (the softmax's weights) or "value" (what each head moves
    # from each key, normalized: Model.trace(..., weights="value"))
    weights: str = "attention"
    # the heads switched off when the text was traced (float32 [L, H], 1 keeps a head; None:
    # every head ran) and what switching off meant (Model.score's ablation)
    head_mask: np.ndarray | None = field(default=None, repr=False)
    ablation: str = "zero"
    # characters of the text as given, when it was longer than the MAX_TEXT_CHARS read
    n_chars_given: int | None = None
    # where the model's own writing starts (Model.generate, models.generation.mark_written)
    prompt_length: int | None = None
    # an encoder-decoder's stack these maps are ("encoder", "decoder": EncoderDecoderTrace)
    attention_kind: str | None = None
    # a view with some positions hidden (analysis.shown_trace): where each token sat in the
    # input it was read from
    kept_positions: list[int] | None = None
    # heads restricted to a sink and a window when the text was traced (engine.windows'
    # described(): {"sink": s, "window": w, "heads": [L][H] of bool}); None: every head whole
    attention_window: dict | None = None

    def __post_init__(self):
        self.special_mask = np.asarray(self.special_mask, dtype=bool)
        self.segment_ids = np.asarray(self.segment_ids, dtype=np.int64)
        if not self.n_tokens_before_truncation:
            self.n_tokens_before_truncation = len(self.token_ids)
        if len(self.maps_shape) != 4 or self.maps_shape[2:] != (self.n_tokens,) * 2:
            raise TraceFileError(
                f"attentions must have shape [L, H, {self.n_tokens}, {self.n_tokens}], "
                f"got {list(self.maps_shape)}"
            )
        check_weights(self.weights)
        if self.head_mask is not None:
            self.head_mask = np.asarray(self.head_mask, dtype=np.float32)
            if self.head_mask.shape != (self.n_layer, self.n_head):
                raise TraceFileError(f"head_mask must be [L, H] = {[self.n_layer, self.n_head]}, "
                                     f"got {list(self.head_mask.shape)}")
        if self.kept_positions is not None:
            self.kept_positions = [int(i) for i in self.kept_positions]
        if self.kv_heads is None:
            self.kv_heads = list(range(self.n_head))
        self.kv_heads = [int(k) for k in self.kv_heads]
        if len(self.kv_heads) != self.n_head:
            raise TraceFileError(f"kv_heads has {len(self.kv_heads)} entries, expected one per "
                                 f"head ({self.n_head})")
        for name in ("tokens", "display_tokens", "special_mask", "segment_ids"):
            if len(getattr(self, name)) != self.n_tokens:
                raise TraceFileError(f"{name} has {len(getattr(self, name))} entries, "
                                     f"expected one per token ({self.n_tokens})")

    # --- the maps: every read handed to their form -----------------------------------------

    def _get_attentions(self) -> np.ndarray:
        return self.maps.materialise(MATERIALISE_MAX_BYTES)

    def _set_attentions(self, value) -> None:
        # the one place a value handed to a trace becomes a form of maps: a form stays as it
        # is, an array is held
        self.maps = value if isinstance(value, Maps) else HeldMaps(value)

    @property
    def value_weighted(self) -> bool:
        """True when the rows are value-weighted (Model.trace(..., weights="value"): what each
        head moves from each key, normalized), not the softmax's weights."""
        return self.weights == "value"

    @property
    def on_demand(self) -> bool:
        """True when the maps are computed when asked for, not held."""
        return self.maps.on_demand

    @property
    def maps_source(self) -> Maps | None:
        """Deprecated (read `maps`): the maps when they are computed on demand, else None."""
        return self.maps if self.maps.on_demand else None

    @property
    def maps_shape(self) -> tuple[int, ...]:
        """[L, H, T, T] without computing anything."""
        return tuple(self.maps.shape)

    def head_map(self, layer: int, head: int) -> np.ndarray:
        """One head's map, float32 [T, T]."""
        return self.maps.head_map(layer, head)

    head = head_map

    def layer_maps(self, layer: int) -> np.ndarray:
        """Every head's map in one layer, float32 [H, T, T]."""
        return self.maps.layer_maps(layer)

    def rows(self, layer: int, start: int, stop: int, heads=None) -> np.ndarray:
        """Query rows start..stop-1 of `heads` (default all) in `layer`: [H', rows, T]."""
        return self.maps.rows(layer, start, stop, heads)

    def weights_between(self, query: int, key: int) -> np.ndarray:
        """[L, H]: the weight from query to key in every head (one row per layer is read,
        whole or on demand)."""
        return np.stack([self.gather_rows(layer, [int(query)])[:, 0, int(key)]
                         for layer in range(self.n_layer)])

    def gather_rows(self, layer: int, rows, heads=None) -> np.ndarray:
        """The given query rows of `heads` (default all) in `layer`: [H', len(rows), T]."""
        return self.maps.gather_rows(layer, rows, heads)

    def row_blocks(self, max_elements: int | None = None, layers=None):
        """(layer, start, stop, rows [H, stop - start, T]) over every layer's query rows, a
        bounded block at a time: how statistics stream over an on-demand trace."""
        max_elements = ondemand.BLOCK_ELEMENTS if max_elements is None else max_elements
        yield from self.maps.row_blocks(max_elements, layers)

    def block_mean(self, layer: int, head: int | None, factor: int) -> np.ndarray:
        """The head's map (head=None: the mean of the layer's heads) averaged over factor x
        factor blocks: the overview of a long input, [ceil(T / f), ceil(T / f)]."""
        return self.maps.block_mean(layer, head, factor)

    def held_bytes(self) -> int:
        """The bytes this trace holds (the maps, or what rebuilds them)."""
        held = self.special_mask.nbytes + self.segment_ids.nbytes + 8 * len(self.token_ids)
        held += sum(len(t) for t in self.tokens) + sum(len(t) for t in self.display_tokens)
        return held + int(self.maps.held_bytes())

    def saved_bytes(self) -> int:
        """About the size of the file save() writes: the maps, or what rebuilds them."""
        return int(self.maps.saved_bytes())

    @property
    def n_layer(self) -> int:
        return self.maps_shape[0]

    @property
    def n_head(self) -> int:
        return self.maps_shape[1]

    # the names traces used before one name per concept (ModelInfo's n_layer, n_head)
    n_layers = property(lambda self: self.n_layer, doc="Deprecated: n_layer.")
    n_heads = property(lambda self: self.n_head, doc="Deprecated: n_head.")

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def special_positions(self) -> list[int]:
        return [int(i) for i in np.flatnonzero(self.special_mask)]

    @property
    def is_pair(self) -> bool:
        return bool(self.segment_ids.any())

    @property
    def n_kv_heads(self) -> int:
        return len(set(self.kv_heads))

    def heads_sharing_kv(self, head: int) -> list[int]:
        """The query heads (this one included) that read the same keys and values."""
        return [h for h, kv in enumerate(self.kv_heads) if kv == self.kv_heads[head]]

    def identity(self) -> tuple:
        """What names this trace in a stored result's key (core.digest): the input that made
        it, read from its fields (the model, token ids, text, and what made the maps: a head
        mask, the kept positions, the stack read, ...), so a trace made again for the same
        input keeps its results; a trace built by hand is named by its maps."""
        origin = self.origin
        if not origin:
            origin = self.__dict__.get("_content_digest")
            if origin is None:
                origin = self.__dict__["_content_digest"] = digest(
                    *(block for _, _, _, block in self.row_blocks()))
        return (origin, self.model_name, self.model_type, self.token_ids, self.segment_ids,
                self.special_mask, self.text, self.text_pair, self.causal, self.meaning())

    def meaning(self) -> dict:
        """What made the maps, by name, as plain values (what a file's metadata holds; None
        and defaults left out)."""
        found = {"weights": self.weights} if self.weights != "attention" else {}
        if self.head_mask is not None:
            found["head_mask"] = self.head_mask.tolist()
            found["ablation"] = self.ablation
        for name in ("n_chars_given", "prompt_length", "attention_kind", "kept_positions",
                     "attention_window"):
            if getattr(self, name) is not None:
                found[name] = getattr(self, name)
        return found

    @property
    def extra(self) -> dict:
        """Deprecated (read the typed fields: weights, head_mask, ...): what made the maps as
        the one dict traces carried before them; a copy, read-only."""
        return self.meaning()

    # --- files -------------------------------------------------------------------------

    def _metadata(self) -> dict:
        return {
            "format": "mha_viz.trace",
            "version": FORMAT_VERSION,
            "causal": self.causal,
            "truncated": self.truncated,
            "n_tokens_before_truncation": self.n_tokens_before_truncation,
            "model_name": self.model_name,
            "model_type": self.model_type,
            "text": self.text,
            "text_pair": self.text_pair,
            **self.meaning(),
            # the same again for mha-viz before version 2, which read only this dict
            "extra": self.meaning(),
            "kv_heads": self.kv_heads,
            "special_tokens": self.special_tokens,
        }

    def save(self, path_or_file) -> None:
        """Write a compressed .npz that numpy can read with allow_pickle=False. An on-demand
        trace writes each layer's queries and keys after rotation (L x (H + H_kv) x T x d_k
        floats), which rebuild its maps with no model, instead of the maps."""
        np.savez_compressed(
            path_or_file,
            **self.maps.saved_arrays(),
            token_ids=np.asarray(self.token_ids, dtype=np.int64),
            tokens=np.asarray(self.tokens, dtype=np.str_),
            display_tokens=np.asarray(self.display_tokens, dtype=np.str_),
            special_mask=self.special_mask,
            segment_ids=self.segment_ids,
            metadata=np.asarray(json.dumps(self._metadata())),
        )

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        self.save(buffer)
        return buffer.getvalue()

    @classmethod
    def load(cls, path_or_file, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> "AttentionTrace":
        """Read a trace written by save(), as a file from anyone: never unpickles; refuses
        files over max_bytes (each array's size is read from its header before anything is
        decompressed or allocated), and maps that are not attention (see check_maps)."""
        if isinstance(path_or_file, (bytes, bytearray)):
            path_or_file = io.BytesIO(path_or_file)
        if isinstance(path_or_file, (str, os.PathLike)):
            size = Path(path_or_file).stat().st_size
            if size > max_bytes:
                raise TraceFileError(f"trace file is {size} bytes, over the limit of {max_bytes}")
        try:
            with zipfile.ZipFile(path_or_file) as archive:
                unpacked = sum(info.file_size for info in archive.infolist())
                if unpacked > max_bytes:
                    raise TraceFileError(f"trace unpacks to {unpacked} bytes, over the limit "
                                         f"of {max_bytes}")
                data = read_members(archive, max_bytes)
            if "metadata" not in data:
                raise TraceFileError("this .npz was not written by mha_viz (no trace metadata)")
            metadata = json.loads(str(data["metadata"]))
            if not isinstance(metadata, dict) or metadata.get("format") != "mha_viz.trace":
                raise TraceFileError("this .npz was not written by mha_viz (no trace metadata)")
            missing = sorted(set(ARRAYS) - set(data))
            if missing:
                raise TraceFileError(f"the trace lacks {', '.join(missing)}")
            for name, (kind, what) in ARRAYS.items():
                if data[name].ndim != 1 or data[name].dtype.kind not in kind:
                    raise TraceFileError(f"{name} must be a flat list of {what}, got an array "
                                         f"of shape {list(data[name].shape)} "
                                         f"({data[name].dtype})")
            if "attentions" in data:
                attentions = check_maps(data["attentions"])
            elif "queries" in data:
                attentions = check_queries_keys(data, bool(metadata["causal"]),
                                                metadata.get("kv_heads"))
                if "value_norms" in data:  # a value-weighted trace of a long input
                    attentions = check_value_norms(attentions, data["value_norms"])
            else:
                raise TraceFileError("the trace holds neither maps nor queries and keys")
            tokens = [visible(t) for t in data["tokens"]]
            trace = cls(
                tokens=tokens,
                token_ids=[int(t) for t in data["token_ids"]],
                attentions=attentions,
                display_tokens=[visible(t) for t in data["display_tokens"]],
                special_mask=data["special_mask"].astype(bool),
                segment_ids=data["segment_ids"].astype(np.int64),
                causal=bool(metadata["causal"]),
                truncated=bool(metadata["truncated"]),
                n_tokens_before_truncation=int(metadata["n_tokens_before_truncation"]),
                model_name=visible(metadata.get("model_name", "")),
                # files saved before model_type was named so call it "arch"
                model_type=visible(metadata.get("model_type", metadata.get("arch", ""))),
                text=str(metadata.get("text", "")),
                text_pair=metadata.get("text_pair"),
                kv_heads=metadata.get("kv_heads"),
                special_tokens=special_tokens_read(metadata, tokens, data["special_mask"]),
                **meaning_read(metadata, len(tokens)),
            )
            trace.origin = "file " + digest(*(data[name] for name in sorted(data)))
        except TraceFileError:
            raise
        except (zipfile.BadZipFile, KeyError, ValueError, TypeError, OSError, EOFError,
                OverflowError) as error:
            raise TraceFileError(f"not a readable mha_viz trace (.npz): {error}") from error
        if not (trace.text_pair is None or isinstance(trace.text_pair, str)):
            raise TraceFileError("the trace's metadata is garbled")
        if any(not 0 <= k < trace.n_head for k in trace.kv_heads):
            raise TraceFileError("kv_heads names a key/value head outside the model")
        return trace


# trace.attentions: the maps held, or all of an on-demand trace's maps computed when they fit
# (a property set after the dataclass is made, so that attentions= stays its argument).
AttentionTrace.attentions = property(
    AttentionTrace._get_attentions, AttentionTrace._set_attentions,
    doc="float32 [L, H, T, T]: every head's map (computed at once for an on-demand trace, "
        "when they fit; see MATERIALISE_MAX_BYTES).")
