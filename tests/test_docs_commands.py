"""Every command of the docs' ``sh`` blocks runs in a test (tests/docs_commands.py classifies them).

``genericdp`` commands run here, on the files they name or on the stand-ins
of GENERICDP_FILES; ``helm install`` is linted and rendered by Helm 3 and 4
with the same flags and what it renders goes to the real API server's dry
run, as ``kubectl apply -k`` does; ``./dev``, e2e scripts and bench modules
take the arguments shown; the release commands name files, arguments and
attestations that exist. The ``kubectl`` commands that need a node run on
the local node (e2e/checks.sh ``docs_commands``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from genericdp.dra.metadata import container_path
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER
from tests.apiserver import ApiServer
from tests.docs_commands import (
    FIRST_HOUR,
    KINDS,
    NODE_FILES,
    NODE_OUTPUT,
    ON_KIND,
    REACHES_A_CLUSTER,
    REPO,
    Command,
    every_command,
    install_steps,
    move_commands,
    node_commands,
    node_shell,
    write_node_files,
    yaml_block_before,
    yaml_block_named,
)
from tests.fakesys import FakeHost
from tests.npm_tools import helm_binary

COMMANDS = every_command()
CHART = "deploy/helm/genericdp"
CHART_YAML = (REPO / CHART / "Chart.yaml").read_text()
CHART_VERSION = re.search(r"^version: (\S+)$", CHART_YAML, re.MULTILINE)[1]  # type: ignore[index]
APP_VERSION = re.search(r'^appVersion: "?([^"\s]+)"?$', CHART_YAML, re.MULTILINE)[1]  # type: ignore[index]
BASE = "deploy/kustomize/base"

SERIAL = """\
version: v1
resources:
  - name: example.com/serial
    match: [{glob: /dev/null}]
"""
SQUAT_CONFIG = """\
domain: squat.ai
devices:
  - name: serial
    groups:
      - paths: [{path: /dev/ttyUSB*}]
"""
VALUES = """\
config:
  version: v1
  resources:
    - name: example.com/serial
      match: [{udev: {subsystem: tty, attributes: {idVendor: "0403", idProduct: "6001"}}}]
"""


def _demo(_: Command) -> str:
    return (REPO / "configs/examples/demo.yaml").read_text()


# placeholder file -> (page or "*", its text): written into the command's
# working directory, which also links every top-level entry of the repository.
GENERICDP_FILES: dict[str, dict[str, Callable[[Command], str]]] = {
    "my.yaml": {"*": lambda _: SERIAL},
    "my-config.yaml": {"docs/config.md": yaml_block_before, "*": _demo},
    "squat-config.yaml": {"*": lambda _: SQUAT_CONFIG},
    "my-values.yaml": {
        "deploy/helm/genericdp/README.md": lambda c: yaml_block_named(c.page, "my-values.yaml"),
        "*": lambda _: VALUES,
    },
    "serial.yaml": {"*": yaml_block_before},
}
# word of a command -> what runs instead
GENERICDP_WORDS = {
    "/etc/generic-device-plugin/config.yaml": "squat-config.yaml",
    "oci://ghcr.io/OWNER/charts/genericdp": CHART,
    "oci://REGISTRY/charts/genericdp": CHART,
    "X.Y.Z": CHART_VERSION,
}


def _of(kind: str) -> list[object]:
    return [pytest.param(c, id=f"{c.where} {c.text}"[:100]) for c in COMMANDS if c.kind == kind]


def _swapped(text: str) -> str:
    for word, instead in GENERICDP_WORDS.items():
        text = text.replace(word, instead)
    return text


def _workdir(command: Command, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for entry in REPO.iterdir():
        (work / entry.name).symlink_to(entry)
    for name, by_page in GENERICDP_FILES.items():
        if name in _swapped(command.text):
            text = by_page.get(command.page, by_page["*"])(command)
            (work / name).write_text(text, encoding="utf-8")
    return work


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}


def _serial_host(root: Path) -> dict[str, str]:
    """The node the docs show ``discover`` and ``simulate`` output of: two FTDI
    FT232R serial adapters, as the settings that point discovery at it."""
    host = FakeHost(root)
    host.add_usb_serial(port="1-2", serial="AAA111", ttys=("ttyUSB0",))
    host.add_usb_serial(port="1-3", serial="BBB222", ttys=("ttyUSB1",))
    return {
        "GENERICDP_DEV_ROOT": str(host.dev),
        "GENERICDP_SYS_ROOT": str(host.sys),
        "GENERICDP_UDEV_ROOT": str(host.udev),
    }


def _squeezed(text: str) -> str:
    return re.sub(r"[ \t]+", " ", text)


def test_every_command_of_the_docs_has_a_kind() -> None:
    """A new command fails here until a rule of tests/docs_commands.py says which test runs it."""
    unknown = [f"{c.where}: {c.text}" for c in COMMANDS if c.kind is None]
    assert not unknown, "add a rule to RULES in tests/docs_commands.py for:\n" + "\n".join(unknown)
    assert {c.kind for c in COMMANDS} == set(KINDS), "a kind no command has: drop it"


def test_the_docs_have_commands_to_run() -> None:
    """The extraction finds the blocks: a broken pattern would leave every test empty."""
    assert len(COMMANDS) >= 50
    assert {c.page for c in COMMANDS} >= {"README.md", "docs/quickstart.md", "docs/deploy.md"}


@pytest.mark.parametrize("command", _of("genericdp"))
def test_a_genericdp_command_of_the_docs_runs(command: Command, tmp_path: Path) -> None:
    """It exits 0 and prints the lines the docs show under it; a file it writes is a config."""
    work = _workdir(command, tmp_path)
    genericdp = f"{shlex.quote(sys.executable)} -m genericdp"
    shell = re.sub(r"^(\.venv/bin/)?genericdp", genericdp, _swapped(command.text))
    env = _env()
    if command.output and re.match(r"\.venv/bin/genericdp (discover|simulate) ", command.text):
        env |= _serial_host(tmp_path / "host")
    done = subprocess.run(
        ["bash", "-c", shell], cwd=work, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for line in command.output:
        assert _squeezed(line) in _squeezed(done.stdout), done.stdout
    if written := re.search(r"> (\S+)$", command.text):
        checked = subprocess.run(
            [sys.executable, "-m", "genericdp", "validate", written[1]], cwd=work, env=_env(),
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert checked.returncode == 0, checked.stdout + checked.stderr


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def _repo_paths(words: list[str], work: Path) -> list[str]:
    return [str(work / w) if "/" in w and (work / w).exists() else w for w in words]


@pytest.mark.parametrize("major", ["helm3", "helm4"])
@pytest.mark.parametrize("command", _of("helm"))
def test_a_helm_install_of_the_docs_renders_what_the_api_server_accepts(
    command: Command, major: str, apiserver: ApiServer, tmp_path: Path
) -> None:
    """helm lint and helm template take its flags; the API server accepts every object."""
    helm = str(helm_binary(major))
    work = _workdir(command, tmp_path)
    _helm, _install, name, chart, *flags = shlex.split(_swapped(command.text))
    flags = _repo_paths(flags, work)
    lint_flags = [f for i, f in enumerate(flags) if "--version" not in (f, flags[i - 1])]
    lint = _run([helm, "lint", chart, *lint_flags], work)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    rendered = _run([helm, "template", name, chart, *flags], work)
    assert rendered.returncode == 0, rendered.stderr
    namespace = flags[flags.index("-n") + 1] if "-n" in flags else "default"
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(rendered.stdout)
    applied = apiserver.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", str(manifest)
    )
    assert "daemonset.apps/genericdp" in applied, applied
    assert all("(server dry run)" in line for line in applied.splitlines()), applied
    values = dict(f.split("=", 1) for f in flags if f.startswith("image."))
    if "image.repository" in values:
        # one setting points the chart at another image: the tag follows the appVersion
        image = f"{values['image.repository']}:{values.get('image.tag', APP_VERSION)}"
        assert f'image: "{image}"' in rendered.stdout, rendered.stdout


@pytest.mark.parametrize("command", _of("apply"))
def test_a_kubectl_apply_of_the_docs_is_accepted_by_the_api_server(
    command: Command, apiserver: ApiServer
) -> None:
    """The API server's dry run, with strict field validation, accepts every object."""
    _kubectl, *args = shlex.split(command.text)
    applied = apiserver.kubectl(*_repo_paths(args, REPO), "--dry-run=server", "--validate=strict")
    assert "daemonset.apps/genericdp" in applied, applied
    assert all("(server dry run)" in line for line in applied.splitlines()), applied


def _apply_base(apiserver: ApiServer) -> None:
    """The kustomize base, applied for real into kube-system, as the pages install it."""
    apiserver.kubectl("apply", "-n", "kube-system", "-k", str(REPO / BASE))


def _delete_base(apiserver: ApiServer) -> None:
    apiserver.kubectl(
        "delete", "-n", "kube-system", "-k", str(REPO / BASE), "--ignore-not-found", "--wait=false"
    )


def _left_of_the_base(apiserver: ApiServer) -> str:
    """The names of the base's objects still on the API server."""
    return apiserver.kubectl(
        "-n", "kube-system", "get", "daemonset,configmap,serviceaccount", "-o", "name"
    ) + apiserver.kubectl("get", "clusterrole,clusterrolebinding", "-o", "name")


def _base_image() -> str:
    rendered = (REPO / BASE / "daemonset.yaml").read_text()
    return re.search(r"^ +image: (\S+)$", rendered, re.MULTILINE)[1]  # type: ignore[index]


@pytest.mark.parametrize("command", _of("install"))
def test_set_image_points_the_installed_base_at_the_built_image(
    command: Command, apiserver: ApiServer
) -> None:
    """The image the page built, tagged with the chart's appVersion as the base's own is,
    replaces the DaemonSet's only image on the real API server."""
    _kubectl, *args = shlex.split(command.text)
    container, image = args[-1].split("=", 1)
    assert image == f"REGISTRY/genericdp:{APP_VERSION}"
    assert _base_image().endswith(f":{APP_VERSION}"), "the base and the chart name one version"
    built = [c.text for c in COMMANDS if c.page == command.page and c.line < command.line]
    assert any(f"-t {image} " in text for text in built), f"nothing on the page builds {image}"
    _apply_base(apiserver)
    try:
        apiserver.kubectl(*args)
        images = apiserver.kubectl(
            "-n", "kube-system", "get", "daemonset/genericdp", "-o",
            "jsonpath={range .spec.template.spec.containers[*]}{.name}={.image}{end}",
        )  # fmt: skip
    finally:
        _delete_base(apiserver)
    assert images == f"{container}={image}"


@pytest.mark.parametrize("command", _of("uninstall"))
def test_an_uninstall_of_the_docs_removes_what_its_install_made(
    command: Command, apiserver: ApiServer
) -> None:
    """kubectl delete -k leaves nothing of the base on the real API server; helm uninstall
    names the release and namespace of a helm install on the page."""
    words = shlex.split(command.text)
    if words[0] == "helm":
        _helm, _uninstall, release, _n, namespace = words
        installs = [shlex.split(c.text) for c in COMMANDS if c.page == command.page]
        assert any(
            w[:3] == ["helm", "install", release] and w[w.index("-n") + 1] == namespace
            for w in installs
            if "-n" in w
        ), f"{command.where}: no helm install of {release} in {namespace} on the page"
        return
    _apply_base(apiserver)
    assert "daemonset.apps/genericdp" in _left_of_the_base(apiserver)
    _kubectl, *args = words
    try:
        apiserver.kubectl("-n", "kube-system", *_repo_paths(args, REPO), "--wait=false")
    finally:
        left = _left_of_the_base(apiserver)
        _delete_base(apiserver)
    assert "genericdp" not in left, left


@pytest.mark.parametrize("command", _of("chart"))
def test_helm_package_makes_the_archive_the_page_pushes(command: Command, tmp_path: Path) -> None:
    """helm package of the chart writes genericdp-VERSION.tgz; what is pushed was packaged."""
    words = shlex.split(command.text)
    if words[1] == "push":
        archive, registry = words[2:]
        assert archive == f"genericdp-{CHART_VERSION}.tgz"
        assert registry.startswith("oci://")
        earlier = [c.text for c in COMMANDS if c.page == command.page and c.line < command.line]
        assert any(text.startswith("helm package ") for text in earlier), "nothing packages it"
        installs = [c.text for c in COMMANDS if c.page == command.page and c.kind == "helm"]
        assert any(f"{registry}/genericdp --version {CHART_VERSION} " in i for i in installs)
        return
    done = _run([str(helm_binary("helm4")), *words[1:-1], str(REPO / words[-1])], tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / f"genericdp-{CHART_VERSION}.tgz").is_file(), done.stdout


def test_the_install_commands_run_on_kind() -> None:
    """e2e/kind runs what docs_commands prints for kind: the push, both ways, both uninstalls,
    the quick start's first hour and its `kind load`."""
    install = (REPO / "e2e/kind/install.sh").read_text()
    run = (REPO / "e2e/kind/run.sh").read_text()
    assert 'tests/docs_commands.py" kind "$REGISTRY"' in install
    ways = ('install.sh" push', "way kustomize", "way helm", 'install.sh" use', 'install.sh" load')
    for way in ways:
        assert way in run, f"e2e/kind/run.sh does not run {way}"
    steps = {(s.way, s.step) for s in install_steps("localhost:5001")}
    assert steps == {
        ("image", "install"),
        ("kustomize", "install"),
        ("kustomize", "uninstall"),
        ("helm", "install"),
        ("helm", "uninstall"),
        ("quickstart", "use"),
        ("image", "load"),
    }
    for step in install_steps("localhost:5001"):
        leftover = re.findall(r"(?<![\w$/-])(?:[A-Z]{3,}|my-[\w-]+)(?![\w=])", step.text)
        assert not leftover, f"{step.where}: {leftover} in {step.text}: add them to KIND_WORDS"


def test_every_cluster_command_of_the_first_hour_runs_on_kind() -> None:
    """What a newcomer with README.md and the quick start runs against a cluster, a registry
    or kind, the kind e2e runs verbatim: a command it does not run fails here.

    Until the quick start's node commands ran on kind (they ran on the local node
    only, with its names), nothing showed its demo-consumer getting a device on a
    cluster installed as the page says.
    """
    run = {where for step in install_steps("localhost:5001") for where in step.where.split(",")}
    first_hour = [c for c in COMMANDS if c.page in FIRST_HOUR]
    reaching = [c for c in first_hour if REACHES_A_CLUSTER.search(c.text)]
    assert len(reaching) >= 15, "the first hour's cluster commands are not found"
    not_run = [f"{c.where}: {c.text}" for c in reaching if c.where not in run]
    assert not not_run, "not run on kind (e2e/kind/install.sh):\n" + "\n".join(not_run)
    printing = {s.text: s.output for s in install_steps("localhost:5001")}
    assert printing["kubectl logs demo-consumer"] == ("DEMO_NULL=/dev/null",)


def test_every_install_command_of_the_docs_runs_on_kind() -> None:
    """A kustomize or Helm install of the docs is run verbatim by the kind e2e, not only dry-run.

    The quick start's old `kubectl apply -n kube-system -k deploy/kustomize/base`
    bound the ClusterRole to default/genericdp; run on kind, the pods could not
    read their Node. An install command the kind e2e does not run fails here.
    """
    installs = [
        c
        for c in COMMANDS
        if re.match(
            r"^(kubectl apply .*-k deploy/kustomize/base|helm install \S+ oci://REGISTRY/)", c.text
        )
        and c.page in ("README.md", "docs/quickstart.md")
    ]
    assert installs, "the quick start has no install command"
    not_run = [f"{c.where}: {c.text}" for c in installs if not ON_KIND.search(c.text)]
    assert not not_run, "not run on kind (e2e/kind/install.sh):\n" + "\n".join(not_run)


def test_the_move_of_docs_dra_runs_on_kind_as_written() -> None:
    """docs/dra.md's move of a node to DRA is commands e2e/kind/dra.sh runs, in the page's order.

    The move's steps were prose with inline commands, which no test ran: the
    kind fleet now runs drain, label, the allocatable read, uncordon and the
    slices' listing on one worker while the other keeps the device plugin.
    """
    script = (REPO / "e2e/kind/dra.sh").read_text()
    assert 'tests/docs_commands.py" move "$A"' in script
    assert '"$E2E_DIR/dra.sh"' in (REPO / "e2e/kind/run.sh").read_text()
    moves = move_commands("kind-worker")
    assert {where.split(":")[0] for where, _text in moves} == {"docs/dra.md"}
    assert [text.split()[1] for _where, text in moves] == [
        "drain",
        "label",
        "get",
        "uncordon",
        "get",
    ]
    assert all("NODE" not in text and "kind-worker" in text for _where, text in moves)
    assert "{.status.allocatable}" in script, "dra.sh asks the allocatable until it reads 0"


def test_the_node_commands_run_in_the_e2e() -> None:
    """e2e/checks.sh kind runs check_docs_commands by default (the kind e2e runs every check), and
    it runs what docs_commands prints."""
    checks = (REPO / "e2e/checks.sh").read_text()
    all_checks = re.search(r"^ALL_CHECKS=\((.*?)\)", checks, re.DOTALL | re.MULTILINE)
    assert all_checks, "e2e/checks.sh has no ALL_CHECKS"
    assert "docs_commands" in all_checks[1].split()
    assert re.search(r'^KIND_CHECKS=\("\$\{ALL_CHECKS\[@\]\}"\)$', checks, re.MULTILINE)
    assert 'tests/docs_commands.py" node' in checks
    assert len(node_commands()) >= 4


@pytest.mark.parametrize("command", node_commands(), ids=lambda c: c.where)
def test_a_node_command_has_only_names_the_e2e_shell_knows(
    command: Command, tmp_path: Path
) -> None:
    """No placeholder left: every capitalised word, my-* name and file is swapped."""
    shell = node_shell(command, tmp_path)
    leftover = re.findall(r"(?<![\w$/-])(?:[A-Z]{3,}|my-[\w-]+|[\w-]+\.yaml)(?![\w=])", shell)
    assert not leftover, f"{command.where}: {leftover} in {shell}: add them to NODE_WORDS"
    assert "kube-system" not in shell


def test_what_a_node_command_must_print_is_on_its_page() -> None:
    """NODE_OUTPUT holds only what the page itself shows, for commands that exist."""
    by_text = {c.text: c for c in COMMANDS if c.kind == "node"}
    for text, shown in NODE_OUTPUT.items():
        assert text in by_text, f"NODE_OUTPUT names a command no page has: {text}"
        page = _squeezed((REPO / by_text[text].page).read_text())
        for want in shown:
            assert want in page, f"{by_text[text].where}: the page does not show {want!r}"


def test_the_node_files_are_the_pages_blocks(tmp_path: Path) -> None:
    """demo-consumer.yaml is the quickstart's block, on the node's image, pulled never."""
    write_node_files(tmp_path, "localhost/busybox:e2e")
    assert set(NODE_FILES) == {p.name for p in tmp_path.iterdir()}
    text = (tmp_path / "demo-consumer.yaml").read_text()
    assert "image: localhost/busybox:e2e\n      imagePullPolicy: Never\n" in text
    assert "example.com/null: 1" in text


@pytest.mark.parametrize("command", _of("dra-metadata"))
def test_the_dra_metadata_path_of_the_docs_is_where_genericdp_mounts_it(command: Command) -> None:
    """The file a container reads for claim serial-claim, request serial, of driver genericdp.io."""
    path = shlex.split(command.text)[-1]
    claim, request = path.split("/")[-3:-1]
    assert path == container_path(DEFAULT_DRIVER, claim, "", request)
    assert (
        "resourceclaimtemplates/dev/dev/$DRIVER-metadata.json"
        in (REPO / "e2e/local/dra.sh").read_text()
    )


# -- ./dev and e2e scripts: the usage they declare -------------------------------------------


def _dev_usage() -> set[str]:
    done = subprocess.run(
        [str(REPO / "dev")], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 2, done.stderr
    return set(done.stderr.split()[-1].split("|"))


def _forwarded_module(subcommand: str) -> str | None:
    """The Python module a ./dev subcommand passes its arguments to."""
    dev = (REPO / "dev").read_text()
    arm = re.search(rf"^  {subcommand}\)(.*?);;", dev, re.DOTALL | re.MULTILINE)
    assert arm, f"./dev has no {subcommand}) case"
    forwarded = re.search(r'-m ([\w.]+) "\$@"', arm[1])
    return forwarded[1] if forwarded else None


def _module_flags(module: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=REPO, env=_env(), capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _usage_lines(script: Path) -> list[list[str]]:
    """The header's ``#   [VAR=V] e2e/...sh ARGS`` lines, as words after the script's name."""
    name = str(script.relative_to(REPO))
    usages = []
    for line in script.read_text().splitlines():
        if not line.startswith("#"):
            break
        words = re.split(r"\s{2,}", line[1:].strip())[0].split()
        while words and "=" in words[0]:
            words.pop(0)
        if words and words[0] == name:
            usages.append(words[1:])
    return usages


def _matches(usage: list[str], args: list[str], values: Callable[[str], set[str] | None]) -> bool:
    """ARGS as USAGE has them: literals, a|b, UPPERCASE for any word, [X] optional, [X...] many."""
    if not usage:
        return not args
    word, rest = usage[0], usage[1:]
    if word.startswith("[") and word.endswith("...]"):
        return _matches(rest, args, values) or bool(
            args and _matches([word[1:-4], *usage], args, values)
        )
    if word.startswith("[") and word.endswith("]"):
        return _matches(rest, args, values) or _matches([word[1:-1], *rest], args, values)
    return bool(args) and _one(word, args[0], values) and _matches(rest, args[1:], values)


def _one(word: str, arg: str, values: Callable[[str], set[str] | None]) -> bool:
    if re.fullmatch(r"[A-Z][A-Z_0-9]*", word):
        allowed = values(word)
        return allowed is None or arg in allowed
    return arg in word.split("|")


def _check_names(placeholder: str) -> set[str] | None:
    if placeholder != "CHECK":
        return None
    return set(re.findall(r"^check_(\w+)\(\)", (REPO / "e2e/checks.sh").read_text(), re.MULTILINE))


@pytest.mark.parametrize("command", _of("script"))
def test_a_script_of_the_docs_takes_the_arguments_shown(command: Command) -> None:
    """./dev knows the subcommand and its module the flags; an e2e script's usage has the words."""
    words = shlex.split(command.text, posix=False)
    env = [w.split("=", 1)[0] for w in words if re.fullmatch(r"[A-Z_]+=\S+", w)]
    script, *args = words[len(env) :]
    if script == "./dev":
        assert args[0] in _dev_usage()
        if flags := [a for a in args[1:] if a.startswith("-")]:
            module = _forwarded_module(args[0])
            assert module, f"./dev {args[0]} passes no arguments on"
            shown = _module_flags(module)
            assert all(f in shown for f in flags), shown
        return
    path = REPO / script
    assert os.access(path, os.X_OK), f"{script} is not an executable here"
    usages = _usage_lines(path)
    assert usages, f"{script} says no usage in its header"
    assert any(_matches(u, args, _check_names) for u in usages), (script, args, usages)
    for variable in env:
        assert re.search(rf"\${{?{variable}\b", path.read_text()), f"{script} reads no {variable}"


@pytest.mark.parametrize("command", _of("bench"))
def test_a_bench_module_of_the_docs_takes_the_flags_shown(command: Command) -> None:
    """The module's --help lists every flag."""
    words = shlex.split(command.text)
    module = words[words.index("-m") + 1]
    shown = _module_flags(module)
    for flag in (w for w in words if w.startswith("--")):
        assert re.search(rf"(^|\s){re.escape(flag)}\b", shown), f"{module} has no {flag}"


@pytest.mark.parametrize("command", _of("variable"))
def test_a_variable_of_the_docs_is_read(command: Command) -> None:
    """Set for the page's next commands, or for the e2e scripts that read it."""
    names = re.findall(r"([A-Z_]+)=", command.text)
    later = " ".join(c.text for c in COMMANDS if c.page == command.page and c.line > command.line)
    scripts = " ".join(p.read_text() for p in (REPO / "e2e").rglob("*.sh"))
    for name in names:
        used = re.compile(rf"\${{?{name}\b")
        assert used.search(later) or used.search(scripts), f"{command.where}: nothing reads {name}"


# -- pip, images and the release -----------------------------------------------------------


@pytest.mark.parametrize("command", _of("pip"))
def test_pip_builds_and_installs_the_wheel_the_docs_name(command: Command, tmp_path: Path) -> None:
    """pip wheel writes dist/genericdp-*.whl from this tree; pip install resolves that wheel."""
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "-w", str(dist), str(REPO)],
        env=_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("genericdp-*.whl")
    if "install" in command.text:
        assert shlex.split(command.text)[-1] == "dist/genericdp-*.whl"
        resolved = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index",
             str(wheel)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert resolved.returncode == 0, resolved.stdout + resolved.stderr
        assert "Would install genericdp-" in resolved.stdout, resolved.stdout


def _build_args(words: list[str]) -> dict[str, str]:
    return dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--build-arg")


@pytest.mark.parametrize("command", _of("image"))
def test_an_image_command_of_the_docs_names_what_exists(command: Command) -> None:
    """Each --build-arg is an ARG, the platforms are the release's; a pushed tag was built."""
    words = shlex.split(command.text)
    release = (REPO / ".github/workflows/release.yaml").read_text()
    if words[1] in ("push", "load"):
        image = words[-1]
        built = [c.text for c in COMMANDS if c.page == command.page and c.line < command.line]
        assert any(f"-t {image}" in text for text in built), f"nothing builds {image}"
        return
    context = REPO / words[-1]
    containerfile = (
        REPO / words[words.index("-f") + 1] if "-f" in words else context / "Containerfile"
    )
    declared = set(re.findall(r"^ARG (\w+)", containerfile.read_text(), re.MULTILINE))
    assert set(_build_args(words)) <= declared, declared
    for flag in (w for w in words if w.startswith("--platform")):
        platforms = words[words.index(flag) + 1]
        assert f"PLATFORMS: {platforms}\n" in release
    for flag in ("--sbom=true", "--provenance=mode=max"):
        if flag in words:
            key, value = flag[2:].split("=", 1)
            assert f"{key}: {value}\n" in release, f"the release builds without {flag}"


@pytest.mark.parametrize("command", _of("release"))
def test_a_release_command_of_the_docs_reads_what_the_release_makes(command: Command) -> None:
    """cosign verify names the release workflow that signs; SBOM and provenance are attested."""
    release = (REPO / ".github/workflows/release.yaml").read_text()
    words = shlex.split(command.text)
    if words[0] == "cosign":
        identity = words[words.index("--certificate-identity") + 1]
        workflow = re.search(r"/genericdp/(\.github/workflows/[\w.-]+)@refs/tags/v", identity)
        assert workflow, identity
        assert (REPO / workflow[1]).read_text() == release
        assert 'cosign sign --yes "$IMAGE@$DIGEST"' in release
        return
    shown = words[words.index("--format") + 1]
    needs = {".SBOM": "sbom: true\n", ".Provenance": "provenance: mode=max\n", ".Manifest": ""}
    (field,) = [f for f in needs if f in shown]
    assert needs[field] in release, f"the release attests no {field}"


def test_the_docs_genericdp_is_the_one_dev_demo_installs() -> None:
    """The docs call .venv/bin/genericdp: the console script of the runtime install that
    `./dev demo` (the README's set-up) makes in .venv, and runs itself."""
    dev = (REPO / "dev").read_text()
    assert "VENV=${VENV:-.venv}" in dev
    assert "BIN=$VENV/bin" in dev
    demo = dev[dev.index("\n  demo)") :].split(";;")[0]
    assert "setup runtime" in demo
    assert '"$BIN/genericdp" simulate' in demo
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r"^\[project\.scripts\]\ngenericdp = ", pyproject, re.MULTILINE)
    assert all(c.text.startswith(".venv/bin/genericdp ") for c in COMMANDS if c.kind == "genericdp")


@pytest.mark.parametrize("major", ["helm3", "helm4"])
def test_the_plain_http_flag_the_quick_start_names_exists_in_both_helms(major: str) -> None:
    """Helm 4 reaches a plain-HTTP registry only with --plain-http (Helm 3 guessed it for
    localhost): the quick start says so, and both Helms take the flag on push and install."""
    page = _squeezed((REPO / "docs/quickstart.md").read_text().replace("\n", " "))
    said = "A registry served over plain HTTP needs `--plain-http` on `helm push` and"
    assert said in page
    for verb in ("push", "install"):
        done = _run([str(helm_binary(major)), verb, "--help"], REPO)
        assert done.returncode == 0, done.stderr
        assert "--plain-http" in done.stdout, f"{major} {verb} has no --plain-http"
