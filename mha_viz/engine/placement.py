"""Where a model's weights live and in what precision: the dtype and device names people
type, checked once, and the way every result leaves the model (float32 numpy on the CPU).

float32 is the default and is exact (maps equal transformers' to 1e-5). bfloat16 and float16
halve the weights' memory and compute the matmuls in that precision, as transformers does;
the parts whose rounding would change what is shown run in float32 whatever the weights are:
- the attention softmax (and the masks added before it): a probability rounded to bfloat16
  keeps 3 significant digits, and a padded key's -inf would overflow float16's range;
- every map, statistic and logit handed to numpy (to_numpy), so the pages and the analyses
  read one dtype.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from ..core.errors import InputError

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16, "half": torch.float16}
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclass(frozen=True)
class Placement:
    """A model's weights' dtype and device."""
    dtype: torch.dtype = torch.float32
    device: torch.device = torch.device("cpu")

    @property
    def dtype_name(self) -> str:
        return DTYPE_NAMES[self.dtype]

    @property
    def device_name(self) -> str:
        return str(self.device)


def parse_dtype(dtype) -> torch.dtype:
    """"float32" / "bfloat16" / "float16" (or bf16, fp16, a torch.dtype) -> torch.dtype."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype in DTYPE_NAMES:
            return dtype
    elif isinstance(dtype, str) and dtype.strip().lower() in DTYPES:
        return DTYPES[dtype.strip().lower()]
    raise InputError(f"dtype {str(dtype)[:40]!r} is not one of float32, bfloat16, float16")


def available_devices() -> list[str]:
    """The devices this machine can run a model on: cpu, each cuda:N, mps."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def parse_device(device) -> torch.device:
    """"cpu" / "cuda" / "cuda:N" / "mps" (or a torch.device) -> a device this machine has;
    a device it lacks is refused naming the ones it has."""
    if device is None:
        return torch.device("cpu")
    try:
        parsed = torch.device(device.strip().lower() if isinstance(device, str) else device)
    except (RuntimeError, TypeError, ValueError):
        raise InputError(f"device {str(device)[:40]!r} is not a device name: use cpu, cuda, "
                         f"cuda:N or mps") from None
    if parsed.type == "cuda" and parsed.index is None:
        parsed = torch.device("cuda", 0)
    if parsed.type not in ("cpu", "cuda", "mps"):
        raise InputError(f"device {parsed} is not one mha-viz runs on: use cpu, cuda, cuda:N "
                         f"or mps")
    if parsed.type != "cpu" and str(parsed) not in available_devices() and not (
            parsed.type == "mps" and "mps" in available_devices()):
        raise InputError(f"this machine has no {parsed} (it has {', '.join(available_devices())})"
                         f"; PyTorch sees no {'GPU' if parsed.type == 'cuda' else 'Apple GPU'}")
    return parsed


def placement(dtype=None, device=None) -> Placement:
    return Placement(parse_dtype(dtype), parse_device(device))


def placement_from_environment() -> Placement:
    """MHA_VIZ_DTYPE and MHA_VIZ_DEVICE (the app's settings; float32 on the CPU by default)."""
    return placement(os.environ.get("MHA_VIZ_DTYPE") or None,
                     os.environ.get("MHA_VIZ_DEVICE") or None)


def free_bytes(device: torch.device) -> int | None:
    """Memory free for a model on this device: the GPU's free memory, or the machine's
    available memory (MemAvailable) for the CPU; None when it cannot be told."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    found = []
    try:
        with open("/proc/meminfo") as info:
            found += [int(line.split()[1]) * 1024 for line in info
                      if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:  # a container's own limit (cgroup v2), which /proc/meminfo does not show
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        if limit != "max":
            found.append(int(limit) - int(open("/sys/fs/cgroup/memory.current").read()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def model_memory_limit(device: torch.device) -> int | None:
    """The bytes a model's weights may take on this device: MHA_VIZ_MODEL_MEMORY_MB when the
    operator sets it, else what the device has free (free_bytes)."""
    value = os.environ.get("MHA_VIZ_MODEL_MEMORY_MB")
    if value:
        try:
            return int(float(value) * 2**20)
        except ValueError:
            pass
    return free_bytes(device)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as numpy on the CPU: bfloat16 and float16 become float32 (numpy has no
    bfloat16, and every consumer reads float32); other dtypes are kept."""
    tensor = tensor.detach()
    if tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.float()
    return tensor.cpu().numpy()


# torch.nn.init's in-place fills: a module's constructor calls them on its new parameters
_INITIALISERS = {"normal_", "uniform_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_",
                 "xavier_uniform_", "xavier_normal_", "orthogonal_", "constant_", "zeros_",
                 "ones_", "fill_", "zero_"}


class _NoInitialisingOnMeta(torch.overrides.TorchFunctionMode):
    """Leaves a meta tensor's initialisation out: it has no values to fill, and torch runs
    normal_ on meta through Python decompositions whose first use imports sympy and the
    compiler's modules (~1 s when a server starts, more on a busy machine)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes tensor=
        if getattr(func, "__name__", "") in _INITIALISERS and isinstance(
                target, torch.Tensor) and target.is_meta:
            return target
        return func(*args, **kwargs)


@contextmanager
def meta_modules():
    """``with meta_modules(): network = build(...)``: modules built on the meta device (no
    memory; their parameters are assigned from a checkpoint after), not initialised."""
    with torch.device("meta"), _NoInitialisingOnMeta():
        yield
