"""An encoder-decoder (T5, BART, Marian) from the same pieces as every other model: two
TransformerStacks, the decoder's layers each with a cross-attention sub-layer whose queries
come from the decoder stream and whose keys and values come from the encoder's output.

    encoder: source ids [B, S] -> states [B, S, d]      (bidirectional self-attention)
    decoder: target ids [B, T] -> self-attention (causal) -> cross-attention to the states
             -> MLP, every layer -> final norm -> LM head -> logits [B, T, vocab]

Nothing here knows a family: the family modules (checkpoints/families/t5.py, bart.py) say
what varies, in the two StackConfigs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..core.errors import InputError
from .config import StackConfig
from .transformer import CrossInput, TransformerStack


@dataclass(frozen=True)
class ImageInput:
    """An encoder that reads an image instead of tokens (cross-modal attention): a grey image
    `height` pixels high, cut into vertical strips `patch_width` pixels wide, left to right;
    each strip's pixels (row by row, 0 = background, 1 = ink) go through one linear layer,
    the patch embedding, as ViT's do. At most max_width pixels wide."""
    height: int
    patch_width: int
    max_width: int

    @property
    def patch_size(self) -> int:
        return self.height * self.patch_width

    @property
    def max_patches(self) -> int:
        return self.max_width // self.patch_width


@dataclass(frozen=True)
class EncoderDecoderConfig:
    """Two stacks and what ties them: the token ids the decoder starts from and stops at,
    the padding id, and whether the two stacks share one token embedding."""
    model_type: str
    encoder: StackConfig
    decoder: StackConfig
    decoder_start_token_id: int
    eos_token_id: int | None
    pad_token_id: int | None
    shared_embeddings: bool = True
    extra: dict = field(default_factory=dict, compare=False)  # for people: the family's words
    image: ImageInput | None = None  # the encoder reads image patches, not tokens
    family: str = ""  # as StackConfig.family

    # What the rest of mha_viz reads of a config, from the decoder (where predictions are).
    @property
    def vocab_size(self) -> int:
        return self.decoder.vocab_size

    @property
    def has_lm_head(self) -> bool:
        return self.decoder.has_lm_head

    def problems(self) -> list[str]:
        found = [f"encoder: {p}" for p in self.encoder.problems()]
        found += [f"decoder: {p}" for p in self.decoder.problems()]
        if self.encoder.d_model != self.decoder.d_model:
            found.append(f"the encoder's width {self.encoder.d_model} is not the decoder's "
                         f"{self.decoder.d_model}")
        if self.shared_embeddings and self.encoder.vocab_size != self.decoder.vocab_size:
            found.append(f"a shared embedding with two vocabulary sizes "
                         f"({self.encoder.vocab_size}, {self.decoder.vocab_size})")
        if not 0 <= self.decoder_start_token_id < self.decoder.vocab_size:
            found.append(f"decoder_start_token_id {self.decoder_start_token_id} is outside "
                         f"the vocabulary")
        if self.image is not None and (
                min(self.image.height, self.image.patch_width) < 1
                or self.image.max_width < self.image.patch_width
                or self.image.max_patches > self.encoder.max_positions):
            found.append(f"an image input of {self.image.height} x {self.image.max_width} "
                         f"pixels in strips {self.image.patch_width} wide does not fit an "
                         f"encoder of {self.encoder.max_positions} positions")
        if self.encoder.causal or not self.decoder.causal or not self.decoder.cross_attention:
            found.append("an encoder-decoder needs a bidirectional encoder and a causal "
                         "decoder with cross-attention")
        return found


def first_id(value) -> int | None:
    """A token id as config.json gives it: a number, a list of them (the first), or none."""
    if isinstance(value, list):
        value = value[0] if value else None
    return None if value is None else int(value)


class EncoderDecoderStack(nn.Module):
    def __init__(self, config: EncoderDecoderConfig):
        super().__init__()
        self.config = config
        self.encoder = TransformerStack(config.encoder)
        self.decoder = TransformerStack(config.decoder)
        if config.shared_embeddings:  # one matrix, as the checkpoint holds it
            self.decoder.tok_emb = self.encoder.tok_emb
        if config.image is not None:
            self.patch_embed = nn.Linear(config.image.patch_size, config.encoder.d_model)
            # a learned vector per strip, added as ViT adds its position embeddings
            self.patch_positions = nn.Parameter(torch.zeros(config.image.max_patches,
                                                            config.encoder.d_model))

    @property
    def device(self) -> torch.device:
        return self.encoder.device

    @property
    def dtype(self) -> torch.dtype:
        return self.encoder.dtype

    def source_vectors(self, input_ids):
        """An image encoder's patches [B, S, patch_size] through the patch embedding, plus
        each strip's position vector (the encoder's embed takes float input as already
        embedded); token ids as they are."""
        if not input_ids.is_floating_point():
            return input_ids
        input_ids = input_ids.to(self.device, self.dtype)
        n = input_ids.shape[1]
        if n > self.patch_positions.shape[0]:
            raise InputError(f"the image is {n} strips wide; this encoder reads at most "
                             f"{self.patch_positions.shape[0]}")
        return self.patch_embed(input_ids) + self.patch_positions[:n]

    def encode(self, input_ids, attention_mask=None, keep_attentions=False,
               attentions_out=None, head_mask=None, ablation="zero", hooks=None,
               layer_inputs=None):
        """Source ids [B, S] (or an image encoder's patches [B, S, patch_size], floats) ->
        (encoder states [B, S, d], kept weights). hooks: an interventions.Hooks at the
        encoder's points (z, result, ...). layer_inputs: a list that receives the hidden
        state entering each layer (what rebuilds a long source's maps on demand)."""
        return self.encoder(self.source_vectors(input_ids), attention_mask=attention_mask,
                            head_mask=head_mask, ablation=ablation,
                            attentions_out=attentions_out, keep_attentions=keep_attentions,
                            hooks=hooks, layer_inputs=layer_inputs)

    def decode(self, decoder_input_ids, states, attention_mask=None, keep_attentions=False,
               attentions_out=None, cross_out=None, head_mask=None, cross_head_mask=None,
               ablation="zero", hooks=None):
        """Target ids [B, T] reading encoder states [B, S, d] -> (last hidden [B, T, d],
        self-attention weights kept, cross-attention weights kept). attentions_out
        [L, H, T, T] and cross_out [L, H, T, S]: buffers the weights are written into.
        hooks: an interventions.Hooks at the decoder's points, cross-attention's included
        (cross_z, ...), and the final norm's scale."""
        decoder = self.decoder
        h = decoder.embed(decoder_input_ids)
        cross = CrossInput(states, self.encoder.key_bias(attention_mask), cross_head_mask,
                           ablation, [] if keep_attentions else None, cross_out)
        h, kept = decoder.run_layers(h, 0, None, decoder.attention_bias(h.shape[1]),
                                     head_mask=head_mask, ablation=ablation,
                                     attentions_out=attentions_out,
                                     keep_attentions=keep_attentions, hooks=hooks, memory=cross)
        return decoder.finish(h, hooks), kept, cross.kept or []

    def forward(self, input_ids, decoder_input_ids, attention_mask=None,
                keep_attentions=False):
        """-> (logits [B, T, vocab], encoder, decoder and cross weights kept: lists of one
        [B, H, ., .] per layer, empty unless keep_attentions)."""
        states, encoder_weights = self.encode(input_ids, attention_mask=attention_mask,
                                              keep_attentions=keep_attentions)
        last, decoder_weights, cross_weights = self.decode(
            decoder_input_ids, states, attention_mask=attention_mask,
            keep_attentions=keep_attentions)
        return self.decoder.lm_logits(last), encoder_weights, decoder_weights, cross_weights


def build_network(config) -> nn.Module:
    """The module a configuration describes: one stack, or an encoder and a decoder."""
    if isinstance(config, EncoderDecoderConfig):
        return EncoderDecoderStack(config)
    return TransformerStack(config)
