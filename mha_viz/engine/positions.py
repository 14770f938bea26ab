"""Where positions enter attention: rotary position embeddings on Q and K (RoPE, with the
long-context scalings of the checkpoints that use them), T5's relative position buckets and
Marian's fixed sinusoids. Each family says in its StackConfig which one it uses."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# --- rotary position embeddings (RoPE) ----------------------------------------------------


@dataclass(frozen=True)
class RopeScaling:
    """How a long-context checkpoint rescales RoPE's frequencies (its config's rope_scaling
    or rope_parameters), computed as transformers computes them:
    - "linear": every frequency divided by factor (positions interpolated);
    - "llama3" (Llama 3.1-3.3): wavelengths past original_max_positions / low_freq_factor
      divided by factor, those under original_max_positions / high_freq_factor kept, a
      smooth blend between;
    - "yarn" (Peng et al. 2023): each frequency interpolated or kept by how many turns it
      makes in the original context (beta_fast, beta_slow), and cos and sin multiplied by
      attention_factor;
    - "dynamic" (NTK): the base grows only past the context, so within it RoPE is plain
      (the family reads it as "default")."""
    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float = 1.0
    truncate: bool = True


ROPE_KINDS = ("default", "linear", "llama3", "yarn")


def inverse_frequencies(rotary_dim: int, theta: float, scaling: RopeScaling | None = None,
                        device=None) -> torch.Tensor:
    """[rotary_dim / 2] the angle per position of each rotating pair: theta^(-2i / rotary_dim),
    rescaled as the checkpoint's RopeScaling says (float32, in transformers' order of
    operations, so the numbers match it)."""
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.int64, device=device).float()
    kind = "default" if scaling is None else scaling.kind
    if kind == "yarn":
        pos_freqs = theta ** (exponents / rotary_dim)
        extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (scaling.factor * pos_freqs)

        def correction_dim(turns: float) -> float:
            return (rotary_dim * math.log(scaling.original_max_positions / (turns * 2 * math.pi))
                    / (2 * math.log(theta)))

        low, high = correction_dim(scaling.beta_fast), correction_dim(scaling.beta_slow)
        if scaling.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, rotary_dim - 1)
        if low == high:
            high += 0.001  # as the reference does, so the ramp is defined
        ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float32, device=device) - low)
                / (high - low)).clamp(0, 1)
        keep = 1 - ramp  # the share of each frequency extrapolated (kept as trained)
        return interpolation * (1 - keep) + extrapolation * keep
    inv_freq = 1.0 / (theta ** (exponents / rotary_dim))
    if kind == "linear":
        inv_freq /= scaling.factor
    elif kind == "llama3":
        old = scaling.original_max_positions
        low_wavelen = old / scaling.low_freq_factor
        high_wavelen = old / scaling.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
        smooth = ((old / wavelen - scaling.low_freq_factor)
                  / (scaling.high_freq_factor - scaling.low_freq_factor))
        smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    elif kind != "default":
        raise ValueError(f"RoPE scaling '{kind}' is not one of {', '.join(ROPE_KINDS)}")
    return inv_freq


def rotary_tables(length: int, rotary_dim: int, theta: float, device=None,
                  scaling: RopeScaling | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, rotary_dim] for positions 0..T-1 (Su et al. 2021, "RoFormer").

    Frequency i (of rotary_dim / 2) is theta^(-2i / rotary_dim), rescaled by scaling
    (inverse_frequencies); the tables repeat the frequencies twice,
    [f_0..f_{r/2-1}, f_0..f_{r/2-1}], for the rotate-half layout: dimension j is paired with
    j + r/2. Computed in float32 as Hugging Face's Llama does, so the numbers match it exactly.
    """
    inv_freq = inverse_frequencies(rotary_dim, theta, scaling, device)
    angles = torch.outer(torch.arange(length, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    if scaling is not None and scaling.attention_factor != 1.0:  # YaRN's magnitude correction
        return angles.cos() * scaling.attention_factor, angles.sin() * scaling.attention_factor
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] on the last dimension (split in two halves)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (j, j + r/2) pair of x [B, H, T, d_k] by its position's angle.

    Only the first r = cos.shape[-1] dimensions rotate (partial rotary, as GPT-NeoX and Phi
    use); the rest pass through unchanged. Rotating q and k by their positions makes
    q_i . k_j depend on i - j only: positions enter the scores, never the values.
    """
    rotary_dim = cos.shape[-1]
    # the float32 tables rounded to x's dtype first, as transformers does in bfloat16
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if rotary_dim == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    rotated, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat((rotated * cos + rotate_half(rotated) * sin, rest), dim=-1)


# --- relative position bias (T5) and sinusoidal positions (Marian) --------------------------


def relative_position_bucket(relative: torch.Tensor, bidirectional: bool, n_buckets: int,
                             max_distance: int) -> torch.Tensor:
    """T5's bucket of each relative position (key position - query position; Raffel et al.
    2020, after Mesh TensorFlow). Bidirectional: half the buckets for keys after the query,
    half for keys before; causal: only keys before (or at) the query. Of each half, the first
    n/2 buckets are exact distances 0..n/2-1, the rest cover n/2..max_distance in
    logarithmically growing steps, and every distance past max_distance shares the last."""
    buckets = torch.zeros_like(relative)
    if bidirectional:
        n_buckets //= 2
        buckets = buckets + (relative > 0).long() * n_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    exact = n_buckets // 2
    # the float arithmetic of the reference (log in float32, then truncation)
    far = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact)
                   * (n_buckets - exact)).long()
    far = far.clamp(max=n_buckets - 1)
    return buckets + torch.where(distance < exact, distance, far)


def relative_positions(n_queries: int, n_keys: int, offset: int = 0) -> torch.Tensor:
    """[T, S] key position - query position, queries at positions offset.."""
    keys = torch.arange(n_keys, device="cpu")  # the caller moves the buckets to the bias
    return keys[None, :] - torch.arange(offset, offset + n_queries, device="cpu")[:, None]


def sinusoidal_table(n_positions: int, dim: int) -> torch.Tensor:
    """[P, d] sinusoidal positions (Vaswani et al. 2017) in Marian's layout: the sines of
    every frequency in the first half, the cosines in the second (not interleaved); angles in
    float64, as the reference computes them."""
    import numpy as np

    j = np.arange(dim)
    angles = np.arange(n_positions)[:, None] / np.power(10000, 2 * (j // 2) / dim)[None, :]
    half = dim // 2 + dim % 2
    table = np.empty((n_positions, dim), dtype=np.float64)
    table[:, :half] = np.sin(angles[:, 0::2])
    table[:, half:] = np.cos(angles[:, 1::2])
    return torch.from_numpy(table).float()
