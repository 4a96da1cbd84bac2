"""The commands of the docs' ``sh`` blocks, each with the kind that says which test runs it.

Every command of a ``sh`` or ``bash`` block in README.md, docs/**/*.md and
the chart's README.md gets the kind of the first rule of ``RULES`` it
matches; one that matches none fails tests/test_docs_commands.py, so a new
command is classified before it is merged. ``KINDS`` says where each kind
runs. What a command names that does not exist here (``my.yaml``, ``POD``,
``X.Y.Z``) is swapped by the tables below, one per kind, kept beside the
rules.

Only the standard library: e2e/checks.sh (``check_docs_commands``) runs
``python3 tests/docs_commands.py node DIR IMAGE`` with the host's Python to
get the node's commands, and e2e/kind/install.sh runs ``python3
tests/docs_commands.py kind REGISTRY DIR IMAGE`` to get the commands it runs
on the kind cluster (the installs, and the quick start's first hour), so the
docs and those checks cannot drift.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = (
    "README.md",
    *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md")),
    "deploy/helm/genericdp/README.md",
)
_SH_BLOCK = re.compile(r"^( *)```(?:sh|bash)\n(.*?)^\1```", re.DOTALL | re.MULTILINE)
_YAML_BLOCK = re.compile(r"^( *)```yaml\n(.*?)^\1```", re.DOTALL | re.MULTILINE)
# "#   text" after a command (three spaces): what the command prints.
_OUTPUT = re.compile(r"^#\s{3}(?P<text>\S.*)$")

KINDS = {
    "genericdp": "tests/test_docs_commands.py runs it here, placeholders from GENERICDP_FILES",
    "helm": "tests/test_docs_commands.py: helm lint and template with Helm 3 and 4, "
    "then the API server's dry run of what they render",
    "apply": "tests/test_docs_commands.py: the API server's dry run (apply --dry-run=server)",
    "move": "e2e/kind/dra.sh runs it on kind, in the page's order, on the worker it moves to DRA",
    "node": "the quick start's run on kind (e2e/kind/install.sh use, KIND_WORDS), the others on "
    "the local node (e2e/checks.sh docs_commands, NODE_WORDS)",
    "dra-metadata": "tests/test_docs_commands.py: the path is the one genericdp mounts; "
    "e2e/local/dra.sh dra_metadata reads such a file in a pod",
    "script": "tests/test_docs_commands.py: the script's usage (./dev's usage line, "
    "an e2e script's header) takes these arguments",
    "bench": "tests/test_docs_commands.py: the module's --help lists every flag shown",
    "install": "tests/test_docs_commands.py: on the real API server, after the base is applied, "
    "it sets the DaemonSet's one image, tagged with the chart's appVersion",
    "uninstall": "tests/test_docs_commands.py: kubectl delete -k removes what the base applied on "
    "the real API server; helm uninstall names a release the page installs",
    "chart": "tests/test_docs_commands.py: helm package makes the archive the page pushes",
    "pip": "tests/test_docs_commands.py: pip builds the wheel here and installs from it",
    "image": "tests/test_docs_commands.py: the files, build arguments and platforms it names "
    "exist; an image pushed or loaded was built on the page",
    "release": "tests/test_docs_commands.py: the release workflow signs and attests what it reads",
    "variable": "tests/test_docs_commands.py: a later command of its page or e2e/ reads it",
}

# docs/dra.md's move of a node to DRA (drain, label, allocatable, uncordon,
# slices): on a node of its own, never the local node's e2e (kind "node").
MOVE = re.compile(
    r"^kubectl (drain|uncordon|label node|get resourceslices) "
    r"|^kubectl get node NODE -o jsonpath='\{\.status\.allocatable\}'$"
)

RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("dra-metadata", r"^kubectl exec \S+ -- cat /var/run/kubernetes\.io/dra-device-attrib"),
        ("apply", r"^kubectl apply -k deploy/kustomize/\S+$"),
        ("install", r"^kubectl -n \S+ set image daemonset/genericdp \S+=\S+$"),
        ("uninstall", r"^(kubectl delete -k deploy/kustomize/\S+|helm uninstall \S+ -n \S+)$"),
        ("move", MOVE.pattern),
        ("node", r"^(POD=\$\()?kubectl "),
        ("helm", r"^helm (install|upgrade) "),
        ("chart", r"^helm (package|push) "),
        ("genericdp", r"^\.venv/bin/genericdp "),
        ("script", r"^([A-Z_]+=\S+ )*(\./dev|e2e/\S+\.sh)( |$)"),
        ("bench", r"^\.venv/bin/python -m bench\.\w+ "),
        ("pip", r"^pip (wheel --no-deps -w dist \.|install dist/genericdp-\*\.whl)$"),
        (
            "image",
            r"^(docker (buildx build|build|push)|podman (build|push)|kind load docker-image) ",
        ),
        ("release", r"^(cosign verify|docker buildx imagetools inspect) "),
        ("variable", r"^(export )?[A-Z_]+=\S+( [A-Z_]+=\S+)*$"),
    )
)


@dataclass(frozen=True)
class Command:
    """One command of a page's sh block: continuation lines joined, its comment dropped."""

    page: str
    line: int
    text: str
    output: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def kind(self) -> str | None:
        return next((kind for kind, rule in RULES if rule.search(self.text)), None)


def _without_comment(line: str) -> str:
    """The line up to a ``#`` that starts a shell comment (outside quotes, after a blank)."""
    quote = ""
    for at, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or line[at - 1].isspace()):
            return line[:at].rstrip()
    return line.rstrip()


def commands(page: str) -> list[Command]:
    """Every command of the page's sh blocks, in order; ``a && b`` is two."""
    text = (REPO / page).read_text(encoding="utf-8")
    found: list[Command] = []
    for block in _SH_BLOCK.finditer(text):
        first = text.count("\n", 0, block.start(2)) + 1
        lines = block.group(2).splitlines()
        at = 0
        while at < len(lines):
            start, joined = at, lines[at].strip()
            while joined.endswith("\\") and at + 1 < len(lines):
                at += 1
                joined = joined[:-1].rstrip() + " " + lines[at].strip()
            at += 1
            output = []
            while at < len(lines) and (shown := _OUTPUT.match(lines[at].strip())):
                output.append(shown["text"])
                at += 1
            shell = _without_comment(joined)
            for part in shell.split(" && ") if shell else ():
                found.append(Command(page, first + start, part.strip(), tuple(output)))
    return found


def every_command() -> list[Command]:
    return [command for page in PAGES for command in commands(page)]


def yaml_blocks(page: str) -> list[tuple[int, str]]:
    """The page's yaml blocks as (first line, text), dedented."""
    text = (REPO / page).read_text(encoding="utf-8")
    blocks = []
    for block in _YAML_BLOCK.finditer(text):
        indent = len(block.group(1))
        body = "".join(line[indent:] + "\n" for line in block.group(2).splitlines())
        blocks.append((text.count("\n", 0, block.start(2)) + 1, body))
    return blocks


def yaml_block_before(command: Command) -> str:
    """The last yaml block of the command's page above it: the file its text is about."""
    before = [body for line, body in yaml_blocks(command.page) if line < command.line]
    if not before:
        msg = f"{command.where}: no yaml block above the command"
        raise LookupError(msg)
    return before[-1]


def yaml_block_named(page: str, name: str) -> str:
    """The page's yaml block whose first line is ``# NAME``."""
    for _line, body in yaml_blocks(page):
        if body.startswith(f"# {name}\n"):
            return body
    msg = f"{page}: no yaml block starting with '# {name}'"
    raise LookupError(msg)


# -- node: e2e/checks.sh check_docs_commands ----------------------------------------

# word of a node command -> what the e2e check's shell has instead (e2e/lib.sh's
# names: the node, the namespace of the e2e DaemonSet, its pod).
NODE_WORDS = {
    "kubectl": "k",
    "kube-system": '"$NAMESPACE"',
    "NODE": '"$NODE"',
    "my-node": '"$NODE"',
    "POD": '"$(daemon_pod)"',
}
# what a node command prints, by its text: each is also on the command's page
# (tests/test_docs_commands.py), whitespace squeezed.
NODE_OUTPUT = {
    "kubectl describe node NODE": (
        "example.com/null: 4", "example.com/zero: 1", "example.com/fuse: 10", "example.com/loop",
    ),
    'kubectl -n kube-system exec "$POD" -- genericdp discover /etc/genericdp': (
        "device /dev/null (host /dev/null, rw)", "env DEMO_NULL=/dev/null",
    ),
    "kubectl logs demo-consumer": ("DEMO_NULL=/dev/null",),
    "kubectl -n kube-system logs daemonset/genericdp --since=5m | grep 'config re'": (
        "config reloaded from /etc/genericdp",
    ),
}  # fmt: skip
# files a node command names: written into the check's directory, from the page.
NODE_FILES = {"demo-consumer.yaml": ("docs/quickstart.md", "demo-consumer.yaml")}
_WORD = re.compile(r"(?<![\w$./-])(?P<word>[\w.-]+)(?![\w=/-])")


def node_shell(command: Command, directory: Path) -> str:
    """The command as the e2e check's shell runs it: NODE_WORDS and NODE_FILES swapped."""

    def swap(match: re.Match[str]) -> str:
        word = match["word"]
        if word in NODE_FILES:
            return shlex.quote(str(directory / word))
        return NODE_WORDS.get(word, word)

    return _WORD.sub(swap, command.text)


def write_node_files(directory: Path, consumer_image: str, pull: str = "Never") -> None:
    """NODE_FILES into DIRECTORY, with the e2e's own consumer image (no Docker Hub there):
    on the local node never pulled, on kind pulled from the run's registry if absent."""
    for name, (page, block) in NODE_FILES.items():
        body = yaml_block_named(page, block)
        body = re.sub(
            r"^( +)image: \S+$",
            rf"\1image: {consumer_image}\n\1imagePullPolicy: {pull}",
            body,
            flags=re.MULTILINE,
        )
        (directory / name).write_text(body, encoding="utf-8")


def node_commands() -> list[Command]:
    """The node commands the local node runs: those the kind e2e does not (kind_step)."""
    return [c for c in every_command() if c.kind == "node" and kind_step(c) is None]


def _print_node_commands(directory: Path, consumer_image: str) -> None:
    """One line a command, tab-separated: where, the shell text, what it must print."""
    directory.mkdir(parents=True, exist_ok=True)
    write_node_files(directory, consumer_image)
    for command in node_commands():
        fields = [command.where, node_shell(command, directory), *NODE_OUTPUT.get(command.text, ())]
        print("\t".join(fields))


# -- on kind: e2e/kind/install.sh -----------------------------------------------------
# Besides the test of its kind, each of these commands of the docs runs
# verbatim on the kind cluster (e2e/kind/install.sh), REGISTRY swapped for the
# run's registry: the push, the kustomize and the Helm install, their uninstall
# (a Helm install with files of the reader's own, `-f my-values.yaml`, is
# rendered and dry-run by its kind's test only).
ON_KIND = re.compile(
    r"^(docker push REGISTRY/"
    r"|kubectl (apply|delete) -k deploy/kustomize/base$"
    r"|kubectl -n kube-system (set image|rollout status) daemonset/genericdp( |$)"
    r"|helm (package|push|uninstall) "
    r"|helm install \S+ oci://REGISTRY/\S+ --version \S+ -n \S+ --set image\.repository=\S+$)"
)
# The first hour: a newcomer with README.md and the quick start only. Every
# command of theirs that reaches a cluster, a registry or kind runs on kind:
# the installs above, the quick start's node commands after the kustomize
# install (step "use", in one shell, in a directory holding NODE_FILES, each
# printing what NODE_OUTPUT says) and `kind load` (step "load").
FIRST_HOUR = ("README.md", "docs/quickstart.md")
REACHES_A_CLUSTER = re.compile(r"^(POD=\$\()?(kubectl|helm|kind|docker push|podman push) ")
# word of a first-hour command -> what the kind e2e's shell has instead
KIND_WORDS = {"NODE": '"$NODE"'}


@dataclass(frozen=True)
class InstallStep:
    """A documented command as the kind e2e runs it: which way, and when."""

    where: str  # every page:line that documents it, comma-separated
    way: str  # image (the push, kind load), kustomize, helm or quickstart
    step: str  # install, uninstall, use or load
    text: str  # verbatim, REGISTRY and KIND_WORDS swapped
    output: tuple[str, ...] = ()  # what it must print (NODE_OUTPUT)


def install_way(text: str) -> str:
    if text.startswith("docker "):
        return "image"
    return "helm" if text.startswith("helm ") else "kustomize"


def kind_step(command: Command) -> tuple[str, str] | None:
    """(way, step) of a command the kind e2e runs, None for one it does not."""
    if ON_KIND.search(command.text):
        uninstall = re.match(r"^(helm uninstall|kubectl delete) ", command.text)
        return install_way(command.text), "uninstall" if uninstall else "install"
    if command.page in FIRST_HOUR and command.text.startswith("kind load docker-image "):
        return "image", "load"
    if command.page in FIRST_HOUR and command.kind == "node":
        return "quickstart", "use"
    return None


def kind_shell(text: str, registry: str) -> str:
    text = re.sub(r"\bREGISTRY\b", registry, text)
    return _WORD.sub(lambda m: KIND_WORDS.get(m["word"], m["word"]), text)


def install_steps(registry: str) -> list[InstallStep]:
    """Every command the kind e2e runs once, in the order of the pages, REGISTRY swapped."""
    steps: dict[str, list[Command]] = {}
    for command in every_command():
        if kind_step(command):
            steps.setdefault(command.text, []).append(command)
    found = []
    for text, commands_ in steps.items():
        way, step = kind_step(commands_[0]) or ("", "")
        where = ",".join(c.where for c in commands_)
        output = NODE_OUTPUT.get(text, ())
        found.append(InstallStep(where, way, step, kind_shell(text, registry), output))
    return found


# -- move: e2e/kind/dra.sh ----------------------------------------------------------


def move_commands(node: str) -> list[tuple[str, str]]:
    """(where, text) of every move command, in the pages' order, NODE swapped for NODE."""
    return [
        (c.where, re.sub(r"\bNODE\b", node, c.text)) for c in every_command() if c.kind == "move"
    ]


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "node":  # node DIR IMAGE
        _print_node_commands(Path(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) in (3, 5) and sys.argv[1] == "kind":  # kind REGISTRY [DIR IMAGE]
        if len(sys.argv) == 5:
            Path(sys.argv[3]).mkdir(parents=True, exist_ok=True)
            write_node_files(Path(sys.argv[3]), sys.argv[4], pull="IfNotPresent")
        for found in install_steps(sys.argv[2]):
            fields = [found.where, found.way, found.step, found.text, *found.output]
            print("\t".join(fields))
    elif len(sys.argv) == 3 and sys.argv[1] == "move":  # move NODE
        for where, text in move_commands(sys.argv[2]):
            print(f"{where}\t{text}")
    else:
        sys.exit(
            "usage: python3 tests/docs_commands.py node DIR CONSUMER_IMAGE\n"
            "       python3 tests/docs_commands.py kind REGISTRY [DIR CONSUMER_IMAGE]\n"
            "       python3 tests/docs_commands.py move NODE"
        )
