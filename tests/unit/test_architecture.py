"""The house's rules, read from the source (docs/architecture.md): no import circle inside
mha_viz/ (imports inside functions count: they are a circle deferred, not removed), no library
module over 500 lines, the library never imports Streamlit outside mha_viz/ui, and a page or
a view calls the library instead of computing (read from their syntax trees)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
    assert "mha_viz.models.model" in edges
    assert "mha_viz.models.seq2seq" in edges["mha_viz.models.model"]
    assert circles(edges) == []


def test_no_library_module_over_500_lines():
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_only_the_ui_package_imports_streamlit():
    users = {name for name, path in modules().items()
             if "import streamlit" in path.read_text() and not name.startswith("mha_viz.ui")}
    assert users == set()


# The layers are the folders: each folder's __init__ docstring says what it holds and ends
# on "May import: a, b." (or "nothing else in mha_viz"). The test reads those lines; no list
# of modules is kept here. Two modules stand at the top, outside every folder: the public
# API (mha_viz/__init__.py re-exports from every layer) and the command line (__main__).
TOP_LEVEL = {"mha_viz", "mha_viz.__main__"}


def folder_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (PACKAGE / parts[-1]).is_dir() else None


def declared_imports() -> dict[str, set[str]]:
    """Each top-level folder's "May import:" line, read from its __init__ docstring."""
    declared = {}
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        lines = [line for line in doc.splitlines() if line.startswith("May import:")]
        assert len(lines) == 1, f"{init.relative_to(ROOT)} says no 'May import:' line"
        said = lines[0].removeprefix("May import:").strip().rstrip(".")
        declared[init.parent.name] = (set() if said == "nothing else in mha_viz"
                                      else {name.strip() for name in said.split(",")})
    return declared


def test_every_module_is_in_a_folder_that_declares_its_imports():
    declared = declared_imports()
    homeless = {m for m in modules() if m not in TOP_LEVEL and folder_of(m) not in declared}
    assert homeless == set()
    unknown = {name for said in declared.values() for name in said} - set(declared)
    assert unknown == set()


def test_each_folder_says_what_it_holds_first():
    """A newcomer reads the folder names and their docstrings' first paragraphs."""
    for init in [*PACKAGE.glob("*/__init__.py"), *PACKAGE.glob("*/*/__init__.py")]:
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert len(doc.split("\n\n")[0]) > 80, init.relative_to(ROOT)


def test_the_folders_are_layers_with_no_circle():
    declared = declared_imports()
    assert circles(declared) == []
    assert declared["core"] == set()  # the bottom layer


def test_no_folder_imports_what_it_does_not_declare():
    declared = declared_imports()
    undeclared = sorted((a, b) for a, targets in graph().items() for b in targets
                        if a not in TOP_LEVEL and b not in TOP_LEVEL
                        and folder_of(a) != folder_of(b)
                        and folder_of(b) not in declared[folder_of(a)])
    assert undeclared == []


def test_the_layer_checks_can_fail():
    assert circles({"core": set(), "a": {"b"}, "b": {"a"}}) == [["a", "b"]]
    assert folder_of("mha_viz.engine.attention") == "engine"
    assert folder_of("mha_viz.analysis") == "analysis"
    assert folder_of("mha_viz.__main__") is None


OTHER_NAMES = r"\.n_kv\b|\bn_kv\s*=|\.head_dim\b|\bhead_dim\s*:|^\s*head_dim\s+=(?!=)"


def test_one_name_per_concept(gpt2_model):
    """n_layer, n_head, d_head and n_kv_head, as ModelInfo names them; n_layers / n_heads
    survive only as the trace's deprecated aliases (tested to agree)."""
    import re

    found = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "app.py"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            # (n_layers / n_heads in quotes: DistilBERT's config.json keys)
            if (re.search(r"(?<![\"'])\bn_(layers|heads)\b(?![\"'])", line)
                    and "Deprecated" not in line
                    # d_head and n_kv_head, as ModelInfo names them (head_dim only as
                    # transformers' config key or keyword)
                    or re.search(OTHER_NAMES, line)):
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
             for path in [*sorted((ROOT / "pages").glob("*.py")),
                          *sorted((PACKAGE / "ui" / "views").rglob("*.py"))]
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if computing.search(line)]
    assert found == []


# How a trace holds its maps (whole, or rebuilt on demand) is the trace's business: pages
# and the ui read heads, rows, block means and streamed statistics, the same for both.
TRACE_STORAGE = {"attentions", "on_demand", "maps", "maps_source", "materialise", "_full"}


def test_no_page_or_ui_module_asks_how_a_trace_holds_its_maps():
    readers = [*ROOT.joinpath("pages").glob("*.py"), ROOT / "app.py",
               *PACKAGE.joinpath("ui").rglob("*.py")]
    asked = sorted(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}"
                   for path in readers for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Attribute) and node.attr in TRACE_STORAGE)
    assert asked == []


def attribute_reads(paths, name: str) -> list[str]:
    """Where `.name` is read (or written) in these files: "path:line"."""
    return sorted(f"{path.relative_to(ROOT)}:{node.lineno}" for path in paths
                  for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Attribute) and node.attr == name)


def calls_of(paths, name: str) -> list[str]:
    """Where the function `name` is called in these files: "path:line"."""
    return sorted(f"{path.relative_to(ROOT)}:{node.lineno}" for path in paths
                  for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Call) and getattr(node.func, "id", "") == name)


def test_one_form_of_maps():
    """A trace always hands its reads to its Maps (maps/forms.py): the library asks which
    storage form a trace has in at most one place (maps_source, the deprecated name of the
    on-demand form, was tested in twelve)."""
    asked = attribute_reads(PACKAGE.rglob("*.py"), "maps_source")
    assert len(asked) <= 1, asked


def test_the_statistics_take_typed_inputs():
    """analysis/ tells a trace from an array by its type (isinstance AttentionTrace), not by
    sniffing attributes: at most three hasattr there, each with its reason beside it (there
    were twenty-one)."""
    sniffed = calls_of(PACKAGE.joinpath("analysis").rglob("*.py"), "hasattr")
    assert len(sniffed) <= 3, sniffed


def test_what_made_a_traces_maps_is_typed():
    """What made a trace's maps is in typed fields (weights, head_mask, prompt_length,
    kept_positions, ...), not an untyped dict: AttentionTrace has no `extra` field, and no
    library module reads or writes one (`.extra`)."""
    trace_class = next(node for node in ast.parse((PACKAGE / "maps" / "trace.py").read_text()).body
                       if isinstance(node, ast.ClassDef) and node.name == "AttentionTrace")
    fields = {node.target.id for node in trace_class.body
              if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
    assert {"weights", "head_mask", "prompt_length", "kept_positions"} <= fields
    assert "extra" not in fields
    assert attribute_reads(PACKAGE.rglob("*.py"), "extra") == []


# ------------------------------------------------------ pages and views: call, not compute
# A page (pages/N_Name.py, app.py's home) is its title and one call to its view; a view
# (mha_viz/ui/views/) reads the library and ui's helpers. Neither computes what the library
# or ui owns: a stored result's key (ui derives it from the call), a hash, a head's flat
# index (layer * n_head + head, i // n_head: analysis.head_index / head_at), a label parsed
# back into data (text[len("mass "):], "L3: ...".split(":")), or what a model can do sniffed
# with hasattr (the library says: corpus.statistics_for, check_attributable, ...).
VIEWS = PACKAGE / "ui" / "views"
PAGE_FILES = [*sorted((ROOT / "pages").glob("*.py")), ROOT / "app.py"]
MAX_PAGE_LINES = 60
STORED = {"memo", "computed", "run_or_wait", "peek", "cancelled"}  # ui's stores: no key=
KEY_MAKERS = {"result_key", "call_key", "digest", "hash", "cache_key", "pruning_key",
              "masked_score_key", "shown_key", "seq2seq_key"}
HASHES = {"hashlib", "zlib", "md5", "sha1", "sha256", "sha512", "blake2b", "blake2s"}
HEAD_COUNTS = {"n_head", "n_layer", "n_heads", "n_layers"}
LABEL_PARSING = {"split", "rsplit", "partition", "rpartition", "removeprefix", "removesuffix"}


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def computed_in_a_page(source: str) -> list[str]:
    """What a page or a view computes that it should call for instead: one line each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any(m.split(".")[0] in HASHES for m in modules):
                found.append(f"{line}: imports a hash")
        elif isinstance(node, ast.Call):
            called = _called(node)
            if called in STORED and any(k.arg == "key" for k in node.keywords):
                found.append(f"{line}: builds the key of a stored result ({called}(key=...))")
            elif called in KEY_MAKERS or called in HASHES:
                found.append(f"{line}: computes a key or a hash ({called})")
            elif called == "hasattr":
                found.append(f"{line}: sniffs an object with hasattr")
            elif called in LABEL_PARSING:
                found.append(f"{line}: parses text ({called})")
            elif called == "divmod" and _names_in(node) & HEAD_COUNTS:
                found.append(f"{line}: works out a head's flat index (divmod)")
        elif isinstance(node, ast.BinOp):
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and not isinstance(
                    node.left, ast.Constant) and _names_in(node.right) & HEAD_COUNTS:
                found.append(f"{line}: works out a head from a flat index (// or % n_head)")
            elif isinstance(node.op, ast.Add) and any(
                    isinstance(side, ast.BinOp) and isinstance(side.op, ast.Mult)
                    and _names_in(side) & HEAD_COUNTS for side in (node.left, node.right)):
                found.append(f"{line}: works out a head's flat index (layer * n_head + head)")
        elif isinstance(node, ast.Slice):
            for end in (node.lower, node.upper):
                if (isinstance(end, ast.Call) and _called(end) == "len" and end.args
                        and isinstance(end.args[0], ast.Constant)
                        and isinstance(end.args[0].value, str)):
                    found.append(f"{line}: slices a label by the length of a literal")
    return found


def test_pages_and_views_call_and_do_not_compute():
    readers = [*PAGE_FILES, *sorted(VIEWS.rglob("*.py"))]
    assert len(readers) > 20  # every page, app.py and the views
    found = [f"{path.relative_to(ROOT)}:{problem}" for path in readers
             for problem in computed_in_a_page(path.read_text())]
    assert found == []


def test_a_page_is_its_title_and_one_call():
    long = {str(path.relative_to(ROOT)): n for path in PAGE_FILES
            if (n := len(path.read_text().splitlines())) > MAX_PAGE_LINES}
    assert long == {}
    for path in sorted((ROOT / "pages").glob("*.py")):
        tree = ast.parse(path.read_text())
        views = [node.module for node in tree.body if isinstance(node, ast.ImportFrom)
                 and (node.module or "").startswith("mha_viz.ui.views")]
        calls = [node for node in tree.body if isinstance(node, ast.Expr)
                 and isinstance(node.value, ast.Call)]
        assert views and len(calls) <= 2, path.name  # page_setup and its view's show()
        assert not [node for node in tree.body
                    if isinstance(node, (ast.FunctionDef, ast.With, ast.If, ast.For))], path.name


def test_the_page_lint_finds_what_a_page_should_not_compute():
    """Each rule fires on the line it is about, and not on what a page may do."""
    computing = {
        'import hashlib': "imports a hash",
        'key = hashlib.sha256(text.encode()).hexdigest()': "computes a key or a hash",
        'found = ui.memo(A.entropy, trace, key=(selection.key, "entropy"))': "builds the key",
        'effects = ui.run_or_wait(ui.pruning_key("ablation", name), f, label="")':
            "computes a key or a hash",
        'ok = hasattr(model, "encoding_of_ids")': "sniffs an object",
        'classes = [n[len("mass "):] for n in result.names]': "slices a label",
        'label = page.description.split(":", 1)[-1]': "parses text",
        'chosen = layer * n_head + head': "flat index",
        'layer = i // trace.n_head': "from a flat index",
        'head = i % n_head': "from a flat index",
        'layer, head = divmod(i, n_head)': "flat index (divmod)",
    }
    for line, problem in computing.items():
        found = computed_in_a_page(line)
        assert len(found) == 1 and problem in found[0], (line, found)
    calling = ['found = ui.memo(A.entropy, trace, normalized=True)',
               'ui.show_figure(fig, key="entropy")', 'cell = int(720 // n_head)',
               'total = n_layer * n_head', 'layer, head = A.head_at(i, n_head)',
               'first = text[:40]', 'ui.button("Run", key="run_ablation")']
    assert [computed_in_a_page(line) for line in calling] == [[]] * len(calling)


def test_views_sit_at_the_top_of_ui():
    """Only a page opens a view: no ui helper imports a view, and a view imports only its
    own parts among the views: <page>_<part>.py beside it, or the modules of its own
    package (views/<page>/, a view written as a context and its sections)."""
    edges = graph()
    views = {name for name in edges if name.startswith("mha_viz.ui.views.")}
    assert len(views) >= 11
    helpers_reading_views = sorted(
        (name, target) for name, targets in edges.items() if not name.startswith(
            "mha_viz.ui.views") for target in targets if target in views)
    assert helpers_reading_views == []
    for name in views:
        page = name.rsplit(".", 1)[1].split("_parts")[0].split("_cross")[0]
        package = name.split(".")[:4]  # mha_viz.ui.views.<page>: a package view's own
        others = {t for t in edges[name] if t in views
                  and not t.rsplit(".", 1)[1].startswith(page)
                  and not (len(t.split(".")) > 4 and t.split(".")[:4] == package)
                  and not (len(name.split(".")) > 4 and t == ".".join(package))}
        assert others == set(), name


PACKAGE_VIEW_MAX_LINES = 80


def test_package_views_are_a_context_and_sections():
    """A view written as a package (issue 58's new style): no function over 80 lines, and
    none defined inside another (show() walks module-level sections that take the
    context)."""
    found = []
    for path in sorted(VIEWS.glob("*/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.end_lineno - node.lineno + 1 > PACKAGE_VIEW_MAX_LINES:
                found.append(f"{path.name}:{node.lineno} {node.name} is over 80 lines")
            inner = [n.name for n in ast.walk(node) if n is not node
                     and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            if inner:
                found.append(f"{path.name}:{node.lineno} {node.name} defines {inner}")
    assert list(VIEWS.glob("*/*.py")) and found == []
