"""RoBERTa (and XLM-RoBERTa's layout when its model_type is roberta): BERT's layers and
masked-LM head under other names, with learned positions that start at padding_idx + 1
(position p reads row p + pad_token_id + 1 of the table: rows 0..pad are never read by a
real token, so max_position_embeddings counts them), one token type."""

from __future__ import annotations

import dataclasses

from ...engine.config import StackConfig
from . import bert

NAME = "roberta"
MODEL_TYPES = ("roberta",)
GGUF_ARCHITECTURES = ()
PREFIXES = ("roberta.",)
# RoBERTa's masked-LM head under BERT's names (the rest of the layout is BERT's own)
HEAD_NAMES = {"lm_head.dense.": "cls.predictions.transform.dense.",
              "lm_head.layer_norm.": "cls.predictions.transform.LayerNorm.",
              "lm_head.bias": "cls.predictions.bias"}


def config_from_hf(raw: dict) -> StackConfig:
    offset = int(raw.get("pad_token_id", 1)) + 1
    config = bert.config_from_hf(raw)
    return dataclasses.replace(config, model_type=NAME, position_offset=offset,
                               max_positions=config.max_positions - offset)


def tensors_from_hf(source, config: StackConfig):
    def bert_name(name: str) -> str:
        for theirs, ours in HEAD_NAMES.items():
            if name.startswith(theirs):
                return ours + name[len(theirs):]
        return name

    source.state.rename(bert_name)  # names only: the tensors are read later, one at a time
    return bert.tensors_from_hf(source, config)
