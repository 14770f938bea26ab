"""A sparse dictionary (sparse autoencoder) as SAELens defines its inference: encode and
decode, the same operations in the same order, for the architectures SAELens writes.

    sae_in = frame(x) - b_dec (when apply_b_dec_to_input)
    standard  a = relu(sae_in W_enc + b_enc)
    jumprelu  a = relu(p) * (p > threshold),        p = sae_in W_enc + b_enc
    topk      a = the k largest of p (relu'd), 0 elsewhere; with rescale_acts_by_decoder_norm
              p is scaled by ||W_dec[f]|| and decoding divides a by it
    gated     a = (sae_in W_enc + b_gate > 0) * relu(sae_in (W_enc * exp(r_mag)) + b_mag)
    x^ = unframe(a W_dec + b_dec)

frame is what normalize_activations says: nothing ("none"), x sqrt(d_in) / ||x||
("constant_norm_rescale") or (x - mean) / (std + 1e-5) ("layer_norm"), undone on the way out
with the input's own numbers. Every step after the frame is affine, so with the frame's
numbers frozen at an input the pre-activation p is linear in x (pre_weights): what the
analyses split exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..core.errors import DictionaryFileError, InputError
from .sites import check_fits_model

ARCHITECTURES = ("standard", "jumprelu", "topk", "gated")
NORMALIZATIONS = ("none", "constant_norm_rescale", "layer_norm")
LAYER_NORM_EPS = 1e-5  # SAELens's run-time layer norm
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64}


@dataclass
class Frame:
    """normalize_activations frozen at an input x [..., d_in]: sae_in = scale_in * (x -
    centre * mean(x)) - b_dec; x^ = scale_out * (a W_dec + b_dec) + shift_out."""
    scale_in: torch.Tensor  # [..., 1]
    centre: bool
    scale_out: torch.Tensor  # [..., 1]
    shift_out: torch.Tensor  # [..., 1]: the mean added back (layer_norm), else 0

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        if self.centre:
            x = x - x.mean(-1, keepdim=True)
        return x * self.scale_in


@dataclass(eq=False)
class SparseDictionary:
    """A dictionary read from (or written to) SAELens's format. Weights are held in the
    file's dtype (cfg "dtype") as SAELens holds them; encode casts its input to it."""
    architecture: str
    W_enc: torch.Tensor  # [d_in, d_sae]
    W_dec: torch.Tensor  # [d_sae, d_in]
    b_dec: torch.Tensor  # [d_in]
    b_enc: torch.Tensor | None  # [d_sae] (None for gated)
    hook_name: str
    site: str
    layer: int
    threshold: torch.Tensor | None = None  # jumprelu
    b_gate: torch.Tensor | None = None  # gated
    b_mag: torch.Tensor | None = None
    r_mag: torch.Tensor | None = None
    k: int | None = None  # topk
    rescale_acts_by_decoder_norm: bool = False
    apply_b_dec_to_input: bool = True
    normalize_activations: str = "none"
    reshape_activations: str = "none"
    metadata: dict = field(default_factory=dict)
    source: str = ""  # where it was read from, in words
    folder: object = None  # the folder it was read from (a Path), if any

    @property
    def d_in(self) -> int:
        return int(self.W_enc.shape[0])

    @property
    def d_sae(self) -> int:
        return int(self.W_enc.shape[1])

    @property
    def dtype(self) -> torch.dtype:
        return self.W_enc.dtype

    @property
    def model_name(self) -> str | None:
        return self.metadata.get("model_name")

    def identity(self) -> tuple:
        """What names this dictionary in a stored result's key (core.digest): where it was
        read from and its weights' size (the file's content is what the source names)."""
        return ("dictionary", self.source, self.hook_name, self.architecture, self.d_sae,
                float(self.W_dec.float().abs().sum()))

    def check_model(self, model) -> None:
        """DictionaryFileError when this dictionary does not fit the model (its layer, its
        width at the site, its heads)."""
        check_fits_model(self, model)

    # ------------------------------------------------------------------ the frame

    def flat(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., d_in], or [..., n_head, d_head] for a hook_z dictionary (SAELens's
        reshape_activations "hook_z" flattens the heads), as [..., d_in] in its dtype."""
        # as_tensor would move a tensor to torch's default device: keep the caller's
        x = x if isinstance(x, torch.Tensor) else torch.as_tensor(x, device="cpu")
        if (self.reshape_activations == "hook_z" and x.ndim >= 2
                and x.shape[-1] != self.d_in and x.shape[-2] * x.shape[-1] == self.d_in):
            x = x.reshape(*x.shape[:-2], self.d_in)
        if x.shape[-1] != self.d_in:
            raise InputError(f"the dictionary reads vectors of {self.d_in} numbers, got a "
                             f"last dimension of {x.shape[-1]}")
        return x

    def frame(self, x: torch.Tensor) -> Frame:
        """normalize_activations' numbers at input x [..., d_in] (see Frame)."""
        one = torch.ones_like(x[..., :1])
        if self.normalize_activations == "constant_norm_rescale":
            coeff = (self.d_in ** 0.5) / x.norm(dim=-1, keepdim=True)
            return Frame(coeff, False, 1 / coeff, 0 * one)
        if self.normalize_activations == "layer_norm":
            mean = x.mean(dim=-1, keepdim=True)
            std = (x - mean).std(dim=-1, keepdim=True)
            return Frame(1 / (std + LAYER_NORM_EPS), True, std, mean)
        return Frame(one, False, one, 0 * one)

    # ------------------------------------------------------------------ encode, decode

    def pre_weights(self, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(W [d_in, d_sae], b [d_sae]) with pre-activation = frame(x) W + b: b_dec's
        subtraction, the decoder-norm rescale (topk) and gated's magnitude path folded in.
        The pre-activation is what the activation reads (SAELens's hook_sae_acts_pre)."""
        dtype = dtype or self.dtype
        w_enc = self.W_enc.to(dtype)
        if self.architecture == "gated":
            weight, bias = w_enc * self.r_mag.to(dtype).exp(), self.b_mag.to(dtype)
        else:
            weight, bias = w_enc, self.b_enc.to(dtype)
        if self.architecture == "topk" and self.rescale_acts_by_decoder_norm:
            norms = self.W_dec.to(dtype).norm(dim=-1)
            weight, bias = weight * norms, bias * norms
        if self.apply_b_dec_to_input:
            bias = bias - self.b_dec.to(dtype) @ weight
        return weight, bias

    def decoder_rows(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """[d_sae, d_in] what one unit of each feature's activation writes (before the
        frame is undone): W_dec, divided by its norms for a rescaled topk dictionary."""
        dtype = dtype or self.dtype
        rows = self.W_dec.to(dtype)
        if self.architecture == "topk" and self.rescale_acts_by_decoder_norm:
            rows = rows / rows.norm(dim=-1, keepdim=True)
        return rows

    def _held(self, x: torch.Tensor) -> torch.Tensor:
        """x where the weights are, in their dtype: a model on a GPU hands its activations
        to a dictionary read onto the CPU, and the results come back there."""
        return x.to(device=self.W_dec.device, dtype=self.dtype)

    def _sae_in(self, x: torch.Tensor) -> torch.Tensor:
        x = self._held(self.flat(x))
        sae_in = self.frame(x).apply(x)
        return sae_in - self.b_dec if self.apply_b_dec_to_input else sae_in

    def pre_activation(self, x: torch.Tensor) -> torch.Tensor:
        """[..., d_sae] the pre-activation at x (see pre_weights), computed as SAELens does."""
        sae_in = self._sae_in(x)
        if self.architecture == "gated":
            return sae_in @ (self.W_enc * self.r_mag.exp()) + self.b_mag
        pre = sae_in @ self.W_enc + self.b_enc
        if self.architecture == "topk" and self.rescale_acts_by_decoder_norm:
            pre = pre * self.W_dec.norm(dim=-1)
        return pre

    def encode(self, x) -> torch.Tensor:
        """Feature activations [..., d_sae] of x [..., d_in] (a hook_z dictionary also takes
        [..., n_head, d_head])."""
        with torch.no_grad():
            pre = self.pre_activation(x)
            if self.architecture == "standard":
                return torch.relu(pre)
            if self.architecture == "jumprelu":
                return torch.relu(pre) * (pre > self.threshold).to(pre.dtype)
            if self.architecture == "gated":
                gate = (self._sae_in(x) @ self.W_enc + self.b_gate) > 0
                return gate.to(pre.dtype) * torch.relu(pre)
            values, indices = torch.topk(pre, k=self.k, dim=-1, sorted=False)
            return torch.zeros_like(pre).scatter_(-1, indices, values.relu())

    def decode(self, acts, x=None) -> torch.Tensor:
        """The reconstruction [..., d_in] of activations [..., d_sae]. A dictionary that
        normalizes its input undoes that with the input's own numbers: pass x."""
        with torch.no_grad():
            acts = self._held(acts if isinstance(acts, torch.Tensor)
                              else torch.as_tensor(acts, device="cpu"))
            if self.architecture == "topk" and self.rescale_acts_by_decoder_norm:
                acts = acts / self.W_dec.norm(dim=-1)
            out = acts @ self.W_dec + self.b_dec
            if self.normalize_activations == "none":
                return out
            if x is None:
                raise InputError(f"this dictionary normalizes its input "
                                 f"({self.normalize_activations}): decode(acts, x=the input "
                                 f"it encoded) undoes it")
            frame = self.frame(self._held(self.flat(x)))
            return out * frame.scale_out + frame.shift_out

    def reconstruct(self, x) -> torch.Tensor:
        """decode(encode(x)), [..., d_in]."""
        return self.decode(self.encode(x), x)
