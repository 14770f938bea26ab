"""mha-viz reads a GGUF's metadata arrays whole (mha_viz.checkpoints.gguf_file: one view per
array of numbers, a memoryview slice per string) where the gguf package makes a numpy view
per element; what it reads must be what the gguf package's own GGUFReader reads, field by
field and tensor by tensor, for every kind of value a GGUF holds."""

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from mha_viz.checkpoints import resolve  # noqa: E402
from mha_viz.checkpoints.gguf_file import GGUFFile  # noqa: E402
from mha_viz.core.errors import CorruptCheckpointError  # noqa: E402


def stock(path):
    """(metadata, tensors by name) as the gguf package reads them."""
    reader = gguf.GGUFReader(str(path))
    fields = {name: field.contents() for name, field in reader.fields.items()
              if not name.startswith("GGUF.")}
    return fields, {t.name: t for t in reader.tensors}


def assert_read_as_gguf_does(path):
    ours = GGUFFile(path)
    fields, tensors = stock(path)
    assert ours.metadata == fields
    assert {name: type(value) for name, value in ours.metadata.items()} == {
        name: type(value) for name, value in fields.items()}
    assert ours.tensor_types == {name: t.tensor_type.name for name, t in tensors.items()}
    for tensor in ours.reader.tensors:
        np.testing.assert_array_equal(tensor.data, tensors[tensor.name].data)


@pytest.fixture
def every_kind(tmp_path):
    """A GGUF with each kind of metadata value: strings (empty, non-ASCII, a NUL inside),
    arrays of every number type, of booleans, of strings, empty arrays, an array of arrays."""
    path = tmp_path / "kinds.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("test.string", "héllo wörld 😀")
    writer.add_string("test.empty_string", "")
    writer.add_array("test.strings", ["", "a", "ü", "Ġthe", "tab\there", "nul\x00in", "😀" * 40])
    writer.add_array("test.no_strings", [])
    writer.add_key_value("test.u8s", [0, 1, 255], gguf.GGUFValueType.ARRAY,
                         sub_type=gguf.GGUFValueType.UINT8)
    writer.add_key_value("test.i16s", [-3, 0, 7], gguf.GGUFValueType.ARRAY,
                         sub_type=gguf.GGUFValueType.INT16)
    writer.add_key_value("test.u64s", [2 ** 40, 1], gguf.GGUFValueType.ARRAY,
                         sub_type=gguf.GGUFValueType.UINT64)
    writer.add_array("test.i32s", list(range(-5, 1000)))
    writer.add_array("test.floats", [0.5, -1.25, 3e38])
    writer.add_array("test.bools", [True, False, True])
    writer.add_array("test.nested", [[1, 2], [3]])
    writer.add_uint32("test.u32", 7)
    writer.add_float32("test.float", 0.25)
    writer.add_bool("test.bool", True)
    writer.add_tensor("token_embd.weight", np.arange(32, dtype=np.float32).reshape(4, 8))
    writer.add_tensor("output.weight", np.ones((4, 8), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_every_kind_of_value_reads_as_gguf_reads_it(every_kind):
    assert_read_as_gguf_does(every_kind)
    assert GGUFFile(every_kind).metadata["test.strings"][-2] == "nul\x00in"


def test_a_random_llama_gguf_reads_as_gguf_reads_it(tmp_path):
    from mha_viz.testing import make_llama_checkpoint, write_llama_gguf

    folder = make_llama_checkpoint(tmp_path / "llama", d_model=64, n_head=4)
    assert_read_as_gguf_does(write_llama_gguf(folder, tmp_path / "random.gguf", "Q4_1"))


@pytest.mark.slow
def test_the_bundled_smollm2_reads_as_gguf_reads_it():
    """A real vocabulary: 49,152 tokens and 48,900 merges, and their token types."""
    path = resolve("smollm2").path
    assert_read_as_gguf_does(path)
    assert len(GGUFFile(path).metadata["tokenizer.ggml.tokens"]) == 49152


def test_an_array_of_strings_cut_short_is_refused(every_kind, tmp_path):
    data = every_kind.read_bytes()
    start = data.index("😀".encode() * 40)  # the last string of test.strings
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(data[:start + 8])
    with pytest.raises(CorruptCheckpointError, match="truncated|damaged"):
        GGUFFile(broken)
