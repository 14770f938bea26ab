"""Beside the layers, testing: random-weight checkpoints in Hugging Face's own format (and
GGUF files), built offline with transformers' own config and model classes, so that tests,
benchmarks and a teacher without network can compare our engine with transformers' on any
family. checkpoints: GPT-2, BERT, the Llama family and its GGUF, encoder-decoders and the
digit reader; families: any decoder or masked-LM encoder transformers holds, from its config class;
gguf_files: a GGUF of each architecture llama.cpp writes (write_gguf), as its converter does.

May import: core, toys.
"""

from .checkpoints import (build_bert_tokenizer, build_gpt2_tokenizer, make_bert_checkpoint,
                          make_gpt2_checkpoint, make_image_to_text_checkpoint,
                          make_llama_checkpoint, make_seq2seq_checkpoint, write_llama_gguf)
from .families import make_decoder_checkpoint, make_encoder_checkpoint
from .gguf_files import write_gguf

__all__ = ["build_bert_tokenizer", "build_gpt2_tokenizer", "make_bert_checkpoint",
           "make_gpt2_checkpoint", "make_image_to_text_checkpoint", "make_llama_checkpoint",
           "make_seq2seq_checkpoint", "write_llama_gguf", "make_decoder_checkpoint",
           "make_encoder_checkpoint", "write_gguf"]
