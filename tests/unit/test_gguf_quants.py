"""Every quantisation type the pinned gguf package dequantises is read, and read as gguf
itself dequantises it: tensors of each type (quantised by gguf.quants where it can, else
blocks of random bytes, kept when gguf decodes them to finite values) in one file, and a
whole model in a ternary type."""

import numpy as np
import pytest
import torch

from mha_viz.checkpoints.gguf_file import DEQUANTIZED_TYPES, GGUFFile

# integer and float64 tensors are not weights a checkpoint quantises
NOT_WEIGHTS = ("I8", "I16", "I32", "I64", "F64")


def random_blocks(qtype, rows: int, row_blocks: int, seed=0) -> np.ndarray:
    """[rows, row_blocks * type size] bytes of valid blocks: random bytes, drawn again where
    their scales decode to infinities, NaNs or huge values."""
    import gguf

    rng = np.random.default_rng(seed)
    type_size = gguf.GGML_QUANT_SIZES[qtype][1]
    blocks = np.empty((rows * row_blocks, type_size), dtype=np.uint8)
    for index in range(len(blocks)):
        while True:
            block = rng.integers(0, 256, (1, type_size), dtype=np.uint8)
            with np.errstate(all="ignore"):
                values = gguf.quants.dequantize(block, qtype)
            if np.isfinite(values).all() and np.abs(values).max() < 1e4:
                break
        blocks[index] = block[0]
    return blocks.reshape(rows, row_blocks * type_size)


def dequantizable(qtype) -> bool:
    import gguf

    try:
        gguf.quants.dequantize(random_blocks(qtype, 1, 1) if gguf.GGML_QUANT_SIZES[qtype][0] > 1
                               else np.zeros(4, dtype=np.uint8), qtype)
        return True
    except NotImplementedError:
        return False


def test_we_read_exactly_the_types_gguf_dequantises():
    import gguf

    types = [t for t in gguf.GGMLQuantizationType if t.name not in NOT_WEIGHTS]
    assert sorted(t.name for t in types if dequantizable(t)) == sorted(DEQUANTIZED_TYPES)


def write_tensors(path, tensors: dict) -> None:
    """A GGUF at path holding tensors ({name: (stored bytes or values, gguf type)}) alone."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    for name, (data, qtype) in tensors.items():
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def file_of_every_type(tmp_path_factory):
    """(path, {name: (type, the values gguf.quants dequantises the stored bytes to)}): one
    [3, 256] tensor per quantised type we read."""
    import gguf

    path = tmp_path_factory.mktemp("quants") / "every_type.gguf"
    expected, stored = {}, {}
    source = np.random.default_rng(1).standard_normal((3, 256)).astype(np.float32)
    for seed, name in enumerate(DEQUANTIZED_TYPES):
        qtype = gguf.GGMLQuantizationType[name]
        block_size = gguf.GGML_QUANT_SIZES[qtype][0]
        try:
            data = gguf.quants.quantize(source, qtype)
        except NotImplementedError:  # no quantiser in gguf: blocks built from bytes
            data = random_blocks(qtype, 3, 256 // block_size, seed)
        expected[f"{name}.weight"] = (name, gguf.quants.dequantize(data, qtype))
        stored[f"{name}.weight"] = (data, qtype)
    write_tensors(path, stored)
    return path, expected


def test_each_type_reads_as_gguf_dequantises_it(file_of_every_type):
    path, expected = file_of_every_type
    opened = GGUFFile(path)
    tensors = opened.lazy_tensors()
    for name, (kind, values) in expected.items():
        assert opened.tensor_types[name] == kind
        read = tensors[name]
        assert read.dtype == torch.float32 and tuple(read.shape) == (3, 256), name
        assert np.array_equal(read.numpy(), values.reshape(3, 256).astype(np.float32)), name
        assert np.isfinite(values).all() and np.abs(values).max() > 0, name


@pytest.mark.parametrize("tensor_type", ["TQ2_0", "MXFP4"])
def test_a_model_in_a_type_we_refused_before_loads(tmp_path, tensor_type):
    """A Llama whose matrices are ternary (TQ2_0) or MXFP4: each weight is gguf's own
    dequantisation of what the file stores (attn_q / attn_k rows put back), and it runs."""
    import gguf

    from mha_viz import load_model
    from mha_viz.checkpoints import load_gguf
    from mha_viz.checkpoints.families.llama import unpermute_rows
    from mha_viz.testing import make_llama_checkpoint, write_gguf

    folder = make_llama_checkpoint(tmp_path / "llama", n_layer=1, n_head=4, n_kv_head=2,
                                   d_model=256, d_ff=256)
    (tmp_path / "gguf").mkdir()  # alone in its folder: no config.json beside it
    path = write_gguf(folder, tmp_path / "gguf" / "model.gguf", tensor_type)
    stored = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape(
        tuple(reversed([int(n) for n in t.shape]))) for t in gguf.GGUFReader(path).tensors}
    kinds = {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}
    assert kinds["blk.0.ffn_down.weight"] == tensor_type
    weights = load_gguf(path)[0].state_dict()
    expected = {
        "tok_emb.weight": stored["token_embd.weight"],
        "blocks.0.attn.out.weight": stored["blk.0.attn_output.weight"],
        "blocks.0.mlp_out.weight": stored["blk.0.ffn_down.weight"],
        "blocks.0.attn.qkv.weight": np.concatenate([
            unpermute_rows(torch.from_numpy(stored["blk.0.attn_q.weight"]), 4).numpy(),
            unpermute_rows(torch.from_numpy(stored["blk.0.attn_k.weight"]), 2).numpy(),
            stored["blk.0.attn_v.weight"]]),
    }
    for name, values in expected.items():
        assert np.array_equal(weights[name].numpy(), values.astype(np.float32)), name
    logits = load_model(path).logits("The cat sat on the mat.")
    assert np.isfinite(logits).all()


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "Q4_1"])
def test_types_dequantized_in_torch_are_gguf_bit_for_bit(tmp_path, name):
    """The types GGUFFile dequantizes in torch rather than with gguf.quants (for speed): many
    blocks of random bytes (every 4- and 8-bit value, scales of every magnitude, subnormal
    ones among them), read back equal to gguf's own dequantisation in every bit."""
    import gguf

    qtype = gguf.GGMLQuantizationType[name]
    data = random_blocks(qtype, 48, 16, seed=7)
    path = tmp_path / f"{name}.gguf"
    write_tensors(path, {"w": (data, qtype)})
    expected = gguf.quants.dequantize(data, qtype).astype(np.float32)
    read = GGUFFile(path).lazy_tensors()["w"]
    assert read.dtype == torch.float32 and tuple(read.shape) == (48, 16 * 32)
    assert np.array_equal(read.numpy().view(np.uint32), expected.view(np.uint32))
    assert len(np.unique(expected)) > 1000  # not a handful of repeated values
