"""The indirect-object example on the real SmolLM2 (bundled): exact head patching of the
default pair finds the heads of the known circuit. Measured (docs/ioi.md): L23.H3 +0.58,
L29.H1 +0.27, L24.H4 -0.25, L20.H0 +0.22, L29.H0 -0.20, L17.H4 +0.18, L19.H2 +0.16, L23.H0
+0.12; every one of the eight strongest heads is in layer 17 or above."""

import numpy as np
import pytest

from mha_viz import TargetMetric, load_model
from mha_viz.analysis import activation_patching

pytestmark = pytest.mark.slow

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


def test_ioi_patching_finds_the_circuit():
    model = load_model("smollm2")
    result = activation_patching(model, CLEAN, CORRUPTED, TargetMetric(-1, " Mary", " John"))
    assert result.clean > 3 and result.corrupted < -3  # the model gets both prompts right
    order = np.argsort(-np.abs(result.normalized).ravel())[:8]
    top = {(int(i) // model.info.n_head, int(i) % model.info.n_head) for i in order}
    assert all(layer >= 15 for layer, _ in top), top  # late layers, not the first ones
    assert {(20, 0), (23, 3), (24, 4)} <= top  # S-inhibition, subject suppression, negative mover
    assert result.normalized[24, 4] < 0 < result.normalized[23, 3]
