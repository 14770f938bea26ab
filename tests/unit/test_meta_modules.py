"""engine.placement.meta_modules: modules built inside it are on the meta device and left
uninitialised (torch's normal_ on meta would import sympy and the compiler: seconds of a
server's start), and only in the thread that builds them."""

import subprocess
import sys
import threading

import torch

from mha_viz.engine.placement import meta_modules


def test_modules_built_inside_are_meta_and_import_no_compiler():
    code = ("import sys, torch\n"
            "from mha_viz.engine.placement import meta_modules\n"
            "with meta_modules():\n"
            "    layers = [torch.nn.Embedding(100, 8), torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)]\n"
            "assert all(p.is_meta for layer in layers for p in layer.parameters())\n"
            "print('sympy' in sys.modules)\n")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True)
    assert found.stdout.strip() == "False"


def test_other_threads_build_initialised_modules_meanwhile():
    built = {}
    inside, done = threading.Event(), threading.Event()

    def build_meta():
        with meta_modules():
            inside.set()
            done.wait(10)
            built["meta"] = torch.nn.Embedding(50, 4)

    thread = threading.Thread(target=build_meta)
    thread.start()
    inside.wait(10)
    torch.manual_seed(0)
    built["cpu"] = torch.nn.Embedding(50, 4)
    done.set()
    thread.join(10)
    assert built["meta"].weight.is_meta
    torch.manual_seed(0)
    reference = torch.empty(50, 4).normal_()  # nn.Embedding's own initialisation
    assert torch.equal(built["cpu"].weight.detach(), reference)
