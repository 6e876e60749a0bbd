"""No import cycle in src/groupcoord: the graph of every import statement of every module,
function-level and TYPE_CHECKING imports included (they hide a cycle, they do not break it),
must be acyclic. ``from pkg import name`` is an edge to the module pkg.name when that is a
module, else to pkg. The implicit import of a parent package is not an edge (every
``import a.b`` runs a/__init__.py; those files only re-export)."""
import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"


def modules() -> dict:
    """module name -> (path, is_package) for every .py file under src/groupcoord."""
    out = {}
    for path in (SRC / "groupcoord").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        out[".".join(parts)] = (path, is_pkg)
    return out


def _owner(name: str, mods: dict):
    """The module a dotted name lives in (the longest prefix that is a module), or None."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict:
    mods = modules()
    graph = {}
    for name, (path, is_pkg) in mods.items():
        package = name if is_pkg else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(_owner(a.name, mods) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    full = base + "." + a.name
                    targets.add(full if full in mods else _owner(base, mods))
        targets.discard(None)
        targets.discard(name)
        graph[name] = targets
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    # shard.py imports the registry at module level, which imports every group module.
    assert "groupcoord.groups.registry" in graph["groupcoord.groups.shard"]
    assert "groupcoord.groups.classic.events" in graph["groupcoord.groups.registry"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_src():
    assert cycles(import_graph()) == []
