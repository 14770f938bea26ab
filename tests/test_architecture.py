"""The house's rules, read from the source (docs/architecture.md): no import circle inside
mha_viz/ (imports inside functions count: they are a circle deferred, not removed), no library
module over 500 lines, and the library never imports Streamlit outside mha_viz/ui."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mha_viz"
MAX_LINES = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The mha_viz modules this one imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # "from . import x" names a submodule
                if f"{target}.{alias.name}" in known:
                    found.add(f"{target}.{alias.name}")
                elif target in known:
                    found.add(target)
    return found - {name}


def graph() -> dict[str, set[str]]:
    known = modules()
    edges = {name: imports_of(name, path, known) for name, path in known.items()}
    # a package's __init__ importing its own submodules is how it re-exports them, and a
    # submodule reached through the package runs that __init__ first; only an edge back from
    # a submodule into its own package's __init__ would close a circle, and is kept
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_circle_and_no_false_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_circle_in_the_library():
    edges = graph()
    # importing a subpackage runs its __init__, which imports its modules: an edge from a
    # submodule to its parent package is a real circle; the parent's own edges down are not
    # a circle unless something below comes back up
    assert "mha_viz.model" in edges and "mha_viz.seq2seq" in edges["mha_viz.model"]
    assert circles(edges) == []


def test_no_library_module_over_500_lines():
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_only_the_ui_package_imports_streamlit():
    users = {name for name, path in modules().items()
             if "import streamlit" in path.read_text() and not name.startswith("mha_viz.ui")}
    assert users == set()


# docs/architecture.md's layers; a module may import from its own layer and those below.
# 0 holds what every layer shares (errors, memory housekeeping, text helpers); "beside" are
# the random-checkpoint builder and the toy training scripts, which only tests and people call
LAYERS = {
    0: {"errors", "memory", "text", "downsample", "arrays"},
    1: {"attention", "transformer", "encoder_decoder", "interventions", "checkpoints"},
    2: {"model", "model_info", "encoding", "scoring", "predictions", "forward_run", "seq2seq",
        "image_to_text", "toy_reading", "toy_training", "tokens", "trace", "ondemand",
        "streaming", "cache", "budget", "jobs"},
    3: {"analysis", "corpus", "inside", "inside_seq2seq", "blockwise", "head_gradients",
        "kv_cache", "prompts", "export", "fit", "results_on_disk"},
    4: {"plots", "ui", "__main__"},
    "beside": {"testing", "toy_translation"},
}


def layer_of(module: str):
    parts = module.split(".")
    if len(parts) == 1:  # mha_viz/__init__.py: the public API, re-exported from every layer
        return "top"
    return next((n for n, names in LAYERS.items() if parts[1] in names), None)


def test_every_module_has_a_layer():
    assert {m for m in modules() if layer_of(m) is None} == set()


def test_no_layer_imports_from_a_layer_above_it():
    upward = [(a, b) for a, targets in graph().items() for b in targets
              if isinstance(layer_of(a), int) and isinstance(layer_of(b), int)
              and layer_of(b) > layer_of(a)]
    assert upward == []


def test_one_name_per_concept(gpt2_model):
    """n_layer and n_head, as ModelInfo names them; n_layers / n_heads survive only as the
    trace's deprecated aliases (tested to agree)."""
    import re

    found = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "app.py"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bn_(layers|heads)\b", line) and "Deprecated" not in line:
                found.append(f"{path.relative_to(ROOT)}:{number}")
    assert found == []
    trace = gpt2_model.trace("one name for one thing")
    assert (trace.n_layers, trace.n_heads) == (trace.n_layer, trace.n_head) == trace.maps_shape[:2]


def test_pages_leave_the_arithmetic_to_the_library():
    """A page is widgets, library calls and layout: numpy there only picks positions
    (arange, flatnonzero) or shapes a table for a download, never computes a number shown."""
    import re

    computing = re.compile(r"\bnp\.(log|exp|mean|nanmean|max|min|nanmax|sum|argsort|argmax|"
                           r"argmin|sqrt|stack|concatenate|unravel_index|round|std|var|"
                           r"corrcoef|linalg)\b")
    found = [f"{path.name}:{number}: {line.strip()}"
             for path in sorted((ROOT / "pages").glob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if computing.search(line)]
    assert found == []


# How a trace holds its maps (whole, or rebuilt on demand) is the trace's business: pages
# and the ui read heads, rows, block means and streamed statistics, the same for both.
TRACE_STORAGE = {"attentions", "on_demand", "maps_source", "materialise", "_full"}


def test_no_page_or_ui_module_asks_how_a_trace_holds_its_maps():
    readers = [*ROOT.joinpath("pages").glob("*.py"), ROOT / "app.py",
               *PACKAGE.joinpath("ui").glob("*.py")]
    asked = sorted(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}"
                   for path in readers for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Attribute) and node.attr in TRACE_STORAGE)
    assert asked == []
