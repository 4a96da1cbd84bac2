"""The import rules drawn atop docs/contributing/architecture.md, checked over src/genericdp.

Imports point down the layers (``LAYERS``); on top of that (``FORBIDDEN``):

- ``runtime`` imports no backend, nor the device-plugin protocol (``kubelet``);
- the backends (``deviceplugin``, ``dra``) never import each other, and only the
  device-plugin backend imports ``kubelet``;
- the Kubernetes API client (``kube``) imports no backend;
- the DRA helper (``kubeletplugin``, the Go ``kubeletplugin`` package's job) imports
  neither the driver behind it (``dra``) nor ``runtime`` nor ``kubelet``, and the
  device-plugin backend never imports it.

Every import counts: at the top of a module, inside a function and under
``if TYPE_CHECKING:``. A new top-level module or package must be placed in
``LAYERS`` (and in the drawing) before it can be imported at all.

Nothing in src/ exists for the tests alone: every module is imported from an
entry point (``genericdp`` the command, ``python -m genericdp``, the modules
``./dev`` runs, the backend packages ``daemon.backend_serving`` imports by name),
but those ``TEST_ONLY`` names, each with why; and every public function, method
and class is named by code outside tests/, but those a library calls by name
(``CALLED_BY_NAME``).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

from genericdp.daemon import backend_package, backend_serving
from genericdp.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "genericdp"

# The backend packages, each the name of a ``--backend`` choice without its
# dashes (``settings.Settings.backend``, ``daemon.backend_serving``).
BACKENDS = frozenset({"deviceplugin", "dra"})
# The one backend that speaks the device-plugin protocol.
PROTOCOL_BACKEND = "deviceplugin"
# The Kubernetes API client: the backends, node labels and the DeviceClass reconciler
# stand on it.
CLIENT = "kube"
# What the Go helper k8s.io/dynamic-resource-allocation/kubeletplugin does for a DRA
# driver (sockets, registration, node lock, claim reads, slice publishing): the DRA
# backend stands on it; it knows no backend, no runtime, no device-plugin protocol.
HELPER = "kubeletplugin"
# Top to bottom: each may import only what is in a lower layer, never its
# neighbours on the same layer nor anything above it. ``__init__`` is the
# package itself (``__version__``). The backends share a layer, so none
# imports another; all sit on ``runtime``.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer.split())
    for layer in (
        "__main__",
        "cli",
        "cliparser daemon simulate report convert configsources deviceclasses",
        "metrics probes nodelabels",
        " ".join(sorted(BACKENDS)),
        "runtime",
        HELPER,
        "kubelet allocation health",
        "hooks lastgood",
        "discovery",
        "config",
        "settings httpserver unixgrpc grpcservices kube",
        "aio",
        "logsetup",
        "errors exits k8snames replicaids atomicfile __init__",
    )
)
# The shared core that every backend uses, and the device-plugin protocol:
# neither imports the other, so a second backend needs no gRPC or kubelet type.
CORE = frozenset({"allocation", "health", "hooks", "discovery", "config"})
PROTOCOL = frozenset({"kubelet"})
PROTOCOL_LIBRARIES = ("grpc", "google.protobuf")
# What the design forbids, whatever the layers say (most pairs are also upward
# imports): the runtime drives a backend it does not know by name; the
# device-plugin protocol is the device-plugin backend's (and the commands') alone;
# the backends stand beside each other; the API client serves every backend and
# knows none; the DRA helper serves its driver without knowing it, and is DRA's alone.
FORBIDDEN: frozenset[tuple[str, str]] = frozenset(
    {("runtime", "kubelet"), ("runtime", HELPER), (PROTOCOL_BACKEND, HELPER)}
    | {(HELPER, into) for into in (*BACKENDS, "runtime", "kubelet")}
    | {("runtime", backend) for backend in BACKENDS}
    | {(CLIENT, backend) for backend in BACKENDS}
    | {(backend, "kubelet") for backend in BACKENDS - {PROTOCOL_BACKEND}}
    | {(a, b) for a in BACKENDS for b in BACKENDS if a != b}
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[str]:
    """Every absolute module name ``path`` imports (``from a import b`` gives ``a.b`` too)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            assert node.module is not None
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _modules() -> dict[str, set[str]]:
    """Each of our modules and the modules of ours it imports."""
    ours = {_module_name(p) for p in SRC.rglob("*.py")}
    return {
        _module_name(p): {name for name in _imports(p) if name in ours} for p in SRC.rglob("*.py")
    }


def _component(module: str) -> str:
    """``genericdp.runtime.state`` -> ``runtime``; ``genericdp`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _package(module: str, packages: set[str]) -> str:
    """The innermost package holding ``module`` (a top-level module stands for itself)."""
    if module in packages or module.count(".") == 1:
        return module
    return module.rpartition(".")[0]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` if it has any (depth-first, three colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def violations(modules: dict[str, set[str]]) -> list[str]:
    """Every import in ``modules`` (module -> modules of ours it imports) against the rules:
    up or across the layers, one of ``FORBIDDEN``, or between the core and the protocol."""
    level = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    wrong: list[str] = []
    for module, targets in sorted(modules.items()):
        for target in sorted(targets):
            source, into = _component(module), _component(target)
            if source == into:
                continue
            if level[into] <= level[source]:
                wrong.append(f"{module} imports {target}: not below it")
            if (source, into) in FORBIDDEN:
                wrong.append(f"{module} imports {target}: {source} never imports {into}")
            if {source, into} & CORE and {source, into} & PROTOCOL:
                wrong.append(f"{module} imports {target}: core and protocol stay apart")
    return wrong


def test_every_component_is_placed_in_a_layer() -> None:
    """A new top-level module or package cannot appear without a place in the drawing."""
    placed = set().union(*LAYERS)
    found = {_component(m) for m in _modules()}
    assert found - placed == set(), "add it to LAYERS and to docs/contributing/architecture.md"
    assert placed - found == set(), "LAYERS names something that no longer exists"


def test_imports_follow_the_rules() -> None:
    """Down the layers only; runtime imports neither kubelet nor a backend; the backends
    import neither each other nor (DRA) the device-plugin protocol; the API client
    imports no backend; core and protocol apart."""
    assert violations(_modules()) == []


def test_the_checker_catches_every_kind_of_violation() -> None:
    """A synthetic module map with one import against each rule: each is reported."""
    synthetic = {
        "genericdp.runtime.supervisor": {
            "genericdp.kubelet.options",  # the runtime knows no protocol...
            "genericdp.dra.backend",  # ...and no backend (also: upward)
            "genericdp.runtime.state",  # its own package: fine
        },
        "genericdp.deviceplugin.plugin": {
            "genericdp.dra.edge",  # a backend imports the other (same layer)
            "genericdp.runtime.state",  # a backend on the runtime: fine
            "genericdp.kubelet.servicer",  # and on its protocol: fine
        },
        "genericdp.dra.edge": {"genericdp.kubelet.devices"},  # DRA on the device-plugin protocol
        "genericdp.discovery.globs": {"genericdp.kubelet.devices"},  # the core on the protocol
        "genericdp.config.model": {"genericdp.cli"},  # upward
        "genericdp.kube.client": {
            "genericdp.dra.checkpoint",  # the API client knows no backend
            "genericdp.kube.listwatch",  # its own package: fine
        },
        "genericdp.kubeletplugin.publisher": {
            "genericdp.dra.inventory",  # the helper knows not its driver (also: upward)
            "genericdp.kube.listwatch",  # the helper on the API client: fine
        },
        "genericdp.deviceplugin.poller": {"genericdp.kubeletplugin.claims"},  # DRA's alone
    }
    wrong = violations(synthetic)
    assert wrong == [
        "genericdp.config.model imports genericdp.cli: not below it",
        "genericdp.deviceplugin.plugin imports genericdp.dra.edge: not below it",
        "genericdp.deviceplugin.plugin imports genericdp.dra.edge: deviceplugin never imports dra",
        (
            "genericdp.deviceplugin.poller imports genericdp.kubeletplugin.claims:"
            " deviceplugin never imports kubeletplugin"
        ),
        "genericdp.discovery.globs imports genericdp.kubelet.devices: not below it",
        "genericdp.discovery.globs imports genericdp.kubelet.devices: core and protocol stay apart",
        "genericdp.dra.edge imports genericdp.kubelet.devices: dra never imports kubelet",
        "genericdp.kube.client imports genericdp.dra.checkpoint: not below it",
        "genericdp.kube.client imports genericdp.dra.checkpoint: kube never imports dra",
        "genericdp.kubeletplugin.publisher imports genericdp.dra.inventory: not below it",
        (
            "genericdp.kubeletplugin.publisher imports genericdp.dra.inventory:"
            " kubeletplugin never imports dra"
        ),
        "genericdp.runtime.supervisor imports genericdp.dra.backend: not below it",
        "genericdp.runtime.supervisor imports genericdp.dra.backend: runtime never imports dra",
        (
            "genericdp.runtime.supervisor imports genericdp.kubelet.options:"
            " runtime never imports kubelet"
        ),
    ]


def test_both_backends_stand_on_the_runtime() -> None:
    """Each backend package imports ``runtime`` (it drives the runner through it)."""
    modules = _modules()
    for backend in sorted(BACKENDS):
        into = {
            _component(t)
            for m, targets in modules.items()
            if _component(m) == backend
            for t in targets
        }
        assert "runtime" in into, backend


def test_every_backend_is_chosen_in_one_place() -> None:
    """A backend is a package and its name among ``Settings.backend``'s choices, nothing
    else: each choice is one of ``BACKENDS`` (a package beside the others), each package
    is a choice, and ``daemon.backend_serving`` opens the package's own ``serving``."""
    choices = get_args(Settings.model_fields["backend"].annotation)
    assert {backend_package(name) for name in choices} == BACKENDS
    for name in choices:
        serving = backend_serving(name)
        assert serving.__module__ == f"genericdp.{backend_package(name)}.backend", name
        assert getattr(serving, "__name__", None) == "serving", name


def test_the_daemon_imports_no_backend() -> None:
    """``serve`` finds each backend by its name (``backend_serving``), so a new backend
    changes no line of ``daemon.py``: it imports no backend's package itself."""
    named = sorted(
        name
        for name in _imports(SRC / "daemon.py")
        if name.startswith("genericdp.") and _component(name) in BACKENDS
    )
    assert named == []


def test_grpc_stays_out_of_the_core() -> None:
    """Discovery, allocation, health, hooks and config work with no gRPC or kubelet type."""
    grpc_in_core = sorted(
        f"{_module_name(p)} imports {name}"
        for p in SRC.rglob("*.py")
        if _component(_module_name(p)) in CORE
        for name in _imports(p)
        if name.startswith(PROTOCOL_LIBRARIES)
    )
    assert grpc_in_core == []


def test_no_cycle_between_packages() -> None:
    """No two packages (subpackages and top-level modules included) import each other."""
    modules = _modules()
    packages = {_module_name(p) for p in SRC.rglob("__init__.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in modules.items():
        source = _package(module, packages)
        for target in targets:
            into = _package(target, packages)
            # A package importing its own subpackage is how packages are built;
            # a subpackage importing back up into its parent is a cycle.
            if into != source and not into.startswith(source + "."):
                graph[source].add(into)
    assert _cycle(graph) is None


def test_the_checks_see_a_cycle_and_an_upward_import() -> None:
    """The cycle finder finds a cycle (the rules above are not vacuously true)."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None
    assert "genericdp.cli" in _modules()["genericdp.__main__"]


# Modules of src/ that only tests import, each with why it is still there; the test
# below fails when one is added, and when one stops being test-only (drop it here).
TEST_ONLY: dict[str, str] = {}


def _entry_points() -> set[str]:
    """The modules something other than a test starts from: the console script and
    ``python -m genericdp`` (pyproject.toml), what ``./dev`` runs with ``-m``, and each
    backend's package, which ``daemon.backend_serving`` imports by name."""
    script = re.search(r'genericdp = "([\w.]+):', (ROOT / "pyproject.toml").read_text())
    assert script is not None, "pyproject.toml names the genericdp console script"
    run = re.findall(r"-m (genericdp[\w.]*)", (ROOT / "dev").read_text())
    backends = {f"genericdp.{backend}.backend" for backend in BACKENDS}
    return {script[1], "genericdp.__main__", *run, *backends}


def _reached(modules: dict[str, set[str]], roots: set[str]) -> set[str]:
    """Every module of ours imported, directly or not, from ``roots`` (importing
    ``a.b.c`` imports the packages ``a.b`` and ``a`` too)."""
    seen: set[str] = set()
    stack = sorted(roots)
    while stack:
        module = stack.pop()
        if module in seen or module not in modules:
            continue
        seen.add(module)
        for target in modules[module]:
            parts = target.split(".")
            stack.extend(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return seen


def _known(module: str) -> str:
    """The entry of ``TEST_ONLY`` holding ``module``, else the module itself."""
    for known in TEST_ONLY:
        if module == known or module.startswith(known + "."):
            return known
    return module


def test_nothing_in_src_is_imported_only_by_tests() -> None:
    """Every module is reached by imports from an entry point, but those ``TEST_ONLY``
    names (a module only tests import belongs in tests/)."""
    modules = _modules()
    unreached = set(modules) - _reached(modules, _entry_points())
    assert {_known(m) for m in unreached} == set(TEST_ONLY)


def test_the_reach_finds_a_module_nothing_imports() -> None:
    """The import walk follows imports and their packages, and nothing else."""
    modules = {
        "genericdp.cli": {"genericdp.a.b"},
        "genericdp.a": set(),
        "genericdp.a.b": set(),
        "genericdp.c": {"genericdp.cli"},
    }
    assert _reached(modules, {"genericdp.cli"}) == {"genericdp.cli", "genericdp.a", "genericdp.a.b"}
    assert "genericdp.cli" in _entry_points()


# Public functions, methods and classes of src/ that no code of ours names, because
# a library calls them by their name: each with who calls it.
CALLED_BY_NAME: dict[str, str] = {
    "collect": "prometheus_client asks a registered collector (metrics.py, deviceclasses/)",
    "connection_lost": "asyncio, on a subprocess protocol (hooks/execution.py)",
    "data_received": "asyncio, on a subprocess protocol (hooks/execution.py)",
    "eof_received": "asyncio, on a subprocess protocol (hooks/execution.py)",
    "NodeWatchResources": "gRPC, by its name in the proto's service (grpcservices.service_handler)",
    **{
        f"visit_{node}": "jinja2's NodeVisitor, by node type (config/templates.py)"
        for node in ("Concat", "For")
    },
}
# Code outside tests/ that may use src/: the benchmarks, tools and e2e checks.
USERS = ("bench", "tools", "e2e")
_GENERATED = re.compile(r"_pb2\.py$")


def _unnamed(sources: dict[str, str], outside: str) -> dict[str, list[str]]:
    """Each public function, method or class defined in ``sources`` (path -> text;
    generated code's definitions skipped) that neither ``sources`` (a name, an
    attribute, an import) nor the word list ``outside`` names -> where it is.

    By name alone: a test-only ``a.f`` goes unseen when some ``b.f`` is used."""
    defined: dict[str, list[str]] = defaultdict(list)
    used: set[str] = set()
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text, path)):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.alias):
                used.add(node.name.rpartition(".")[2])
            elif (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and not node.name.startswith("_")
                and not _GENERATED.search(path)
            ):
                defined[node.name].append(f"{path}:{node.lineno}")
    words = set(re.findall(r"\w+", outside))
    return {name: where for name, where in defined.items() if name not in used | words}


def test_nothing_in_src_is_named_only_by_tests() -> None:
    """Every public function, method and class of src/ is named by code outside tests/
    (src/ itself, the benchmarks, tools and e2e checks), but those ``CALLED_BY_NAME``:
    one only tests call belongs in tests/. The allow-list holds no stale entry."""
    sources = {str(p.relative_to(SRC)): p.read_text() for p in SRC.rglob("*.py")}
    outside = "\n".join(p.read_text() for d in USERS for p in (ROOT / d).rglob("*.py"))
    unnamed = _unnamed(sources, outside)
    assert {n: w for n, w in unnamed.items() if n not in CALLED_BY_NAME} == {}
    assert set(CALLED_BY_NAME) <= set(unnamed), "CALLED_BY_NAME names code now used"


def test_the_name_check_finds_what_only_tests_call() -> None:
    """A function, method or class nothing names is found; a use by a name, an
    attribute, an import or outside code (or in generated code) is seen."""
    sources = {
        "a.py": "def lonely(): pass\nclass Shown:\n    def seen(self): pass\n"
        "    def unseen(self): pass\ndef by_bench(): pass\n",
        "b.py": "from a import Shown\nShown().seen()\n",
        "c_pb2.py": "def generated(): pass\n",
    }
    assert _unnamed(sources, "by_bench()") == {"lonely": ["a.py:1"], "unseen": ["a.py:4"]}
