"""A random checkpoint of any family transformers holds, from its own config and model
classes (decoders with a byte-level BPE, encoders with BERT's WordPiece vocabulary): the
parity tests' references."""

from __future__ import annotations

from pathlib import Path

from .checkpoints import build_bert_tokenizer, build_gpt2_tokenizer


def make_encoder_checkpoint(folder: str | Path, config_class: str, model_class: str, seed=0,
                            init_std=0.2, **config) -> Path:
    """make_decoder_checkpoint for a masked-LM encoder (RoBERTa, DistilBERT): BERT's real
    WordPiece tokenizer (the bundled MiniLM's) instead of a byte-level BPE."""
    return make_decoder_checkpoint(folder, config_class, model_class, seed, init_std,
                                   tokenizer=build_bert_tokenizer, **config)


def make_decoder_checkpoint(folder: str | Path, config_class: str, model_class: str, seed=0,
                            init_std=0.2, tokenizer=build_gpt2_tokenizer, **config) -> Path:
    """Save a random transformers.<model_class>(<config_class>(**config)) with a byte-level
    BPE tokenizer (or the one tokenizer(folder) saves) to folder (safetensors); return the
    folder. The vocabulary, BOS/EOS ids (config may override them) and eager attention are
    set here. As for GPT-2, init_std far above the usual 0.02 makes
    the maps sharp; every norm's weight and bias and every bias of a linear layer is
    perturbed (fresh ones are 1 and 0), so a norm mixed up or a bias dropped shows."""
    import torch
    import transformers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer(folder)
    config = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
              **config}
    settings = getattr(transformers, config_class)(
        vocab_size=len(tokenizer), initializer_range=init_std, **config)
    settings._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(settings)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            is_norm = "norm" in type(module).__name__.lower()
            for name in ("weight", "bias"):
                tensor = getattr(module, name, None) if (is_norm or name == "bias") else None
                if isinstance(tensor, torch.Tensor) and tensor.dim() == 1:
                    spread = 0.1 if is_norm else 1.0  # a bias spread like the outputs'
                    tensor.add_(spread * torch.randn(tensor.shape, generator=generator))
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder
