"""The PyInstaller recipe names every resource the app loads. Three views of "loads": the files in
resources/, the paths app/ and engine/ build from their resource folder constants (read from the
source), and the files a real run of the window opens (an audit hook). Each must be in the spec's
datas, so a QSS, theme or icon left out of the bundle fails here instead of on a user's desktop."""
import ast
import fnmatch
import json
import subprocess
import sys
import types

import pytest

from packaging_support import PACKAGING, ROOT

SPEC = PACKAGING / "swarmscope.spec"


class _Recorded:
    """Stands in for PyInstaller's Analysis/PYZ/EXE/COLLECT: keeps what the spec passes."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        self.pure = self.scripts = self.datas = ()
        # What Analysis finds on a build machine with Debian's hipcc installed.
        self.binaries = [("libQt6Core.so.6", "/x/libQt6Core.so.6", "BINARY"),
                         ("libamdhip64.so", "/lib/x86_64-linux-gnu/libamdhip64.so", "BINARY"),
                         ("libdrm_amdgpu.so.1", "/lib/x86_64-linux-gnu/libdrm_amdgpu.so.1", "BINARY")]


@pytest.fixture(scope="module")
def spec_calls():
    """Executes swarmscope.spec with PyInstaller's build classes replaced by recorders."""
    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_submodules = lambda package: [f"{package}.collected"]
    saved = {name: sys.modules.get(name) for name in ("PyInstaller", "PyInstaller.utils",
                                                      "PyInstaller.utils.hooks")}
    sys.modules.update({"PyInstaller": types.ModuleType("PyInstaller"),
                        "PyInstaller.utils": types.ModuleType("PyInstaller.utils"),
                        "PyInstaller.utils.hooks": hooks})
    calls: dict[str, _Recorded] = {}

    def recorder(name):
        def make(*args, **kwargs):
            calls[name] = _Recorded(*args, **kwargs)
            return calls[name]
        return make

    namespace = {"SPECPATH": str(PACKAGING), "__name__": "__main__",
                 **{name: recorder(name) for name in ("Analysis", "PYZ", "EXE", "COLLECT")}}
    try:
        exec(compile(SPEC.read_text(), str(SPEC), "exec"), namespace)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return calls


@pytest.fixture(scope="module")
def bundled(spec_calls) -> set[str]:
    """Paths relative to the bundle root of every data file the spec puts in."""
    out = set()
    for source, dest in spec_calls["Analysis"].kwargs["datas"]:
        source = ROOT.joinpath(source).resolve()
        assert source.is_file(), f"spec names a missing file {source}"
        out.add(f"{dest}/{source.name}")
    return out


def test_spec_bundles_every_file_in_resources(bundled):
    tree = {p.relative_to(ROOT).as_posix() for p in (ROOT / "resources").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}
    missing = sorted(tree - bundled)
    assert not missing, f"not in packaging/bundle_manifest.py RESOURCE_PATTERNS: {missing}"


def test_spec_builds_dist_swarmscope_from_the_launcher_with_every_project_module(spec_calls):
    analysis = spec_calls["Analysis"]
    assert [str(s) for s in analysis.args[0]] == [str(PACKAGING / "launcher.py")]
    # Subcommands and app.main are imported by name, so the spec must collect both packages.
    assert {"engine.collected", "app.collected"} <= set(analysis.kwargs["hiddenimports"])
    assert spec_calls["EXE"].kwargs["name"] == spec_calls["COLLECT"].kwargs["name"] == "swarmscope"


def test_cpu_bundle_ships_no_gpu_runtime(spec_calls):
    collected = [entry[0] for entry in spec_calls["COLLECT"].args[1]]
    assert collected == ["libQt6Core.so.6"]


def _segment(node: ast.expr) -> str:
    """One path segment as a glob: literals stay, anything computed becomes *."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)
    return "*"


def _div_chain(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _div_chain(node.left) + [node.right]
    return [node]


def resource_globs() -> set[str]:
    """Globs of the resource paths app/ and engine/ build, such as resources/themes/*.json from
    `RESOURCES / "themes" / f"{name}.json"`: first the module constants that name a folder under
    resources/, then every `CONSTANT / ... / ...` expression built on one of them."""
    trees = [ast.parse(p.read_text(), str(p)) for folder in ("app", "engine")
             for p in sorted((ROOT / folder).rglob("*.py"))]
    bases: dict[str, list[str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                parts = [_segment(n) for n in _div_chain(node.value)]
                if "resources" in parts:
                    bases[node.targets[0].id] = parts[parts.index("resources"):]
    globs = set()
    for tree in trees:
        inner = {id(n.left) for n in ast.walk(tree)
                 if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)}
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and id(node) not in inner:
                chain = _div_chain(node)
                if isinstance(chain[0], ast.Name) and chain[0].id in bases:
                    globs.add("/".join(bases[chain[0].id] + [_segment(n) for n in chain[1:]]))
    return globs


def test_every_resource_path_in_the_source_matches_a_bundled_file(bundled):
    globs = resource_globs()
    # The scan must see the app's own loads, or it proves nothing.
    assert {"resources/qss/app.qss", "resources/themes/*.json"} <= globs, globs
    unmatched = sorted(g for g in globs if not fnmatch.filter(bundled, g))
    assert not unmatched, f"the source loads these but the bundle has no match: {unmatched}"


def test_every_theme_is_bundled(bundled):
    from app.theme import THEMES
    assert {f"resources/themes/{name}.json" for name in THEMES} <= bundled


# Runs the window for two seconds on the tiny model with every theme loaded, recording each file
# opened inside the checkout (Python's own opens; Qt's C++ file reads are covered by the AST scan).
# Package metadata of the editable install (egg-info, the __editable__ finder) is pip's, not ours.
_AUDIT = """
import json, os, sys
root, out = sys.argv[1], sys.argv[2]
venv = os.path.join(root, ".venv")
opened = set()
def hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if path.startswith(root + os.sep) and not path.startswith(venv + os.sep) \\
                and not path.endswith((".py", ".pyc")) and "__pycache__" not in path \\
                and ".egg-info" not in path and "__editable__" not in path:
            opened.add(os.path.relpath(path, root))
sys.addaudithook(hook)
from app.theme import THEMES, Theme
for name in THEMES:
    Theme.load(name).stylesheet()
from app.main import main
code = main(["--model", "tiny-test", "--trace-out", "none", "--quit-after", "2"])
with open(out, "w") as f:
    json.dump({"opened": sorted(opened), "modules": sorted({m.split(".")[0] for m in sys.modules})}, f)
sys.exit(code)
"""


@pytest.fixture(scope="module")
def app_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit") / "audit.json"
    result = subprocess.run([sys.executable, "-c", _AUDIT, str(ROOT), str(out)],
                            cwd=out.parent, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_files_the_running_app_opens_are_bundled(app_run, bundled):
    opened = set(app_run["opened"])
    assert "resources/qss/app.qss" in opened, "the audit hook saw nothing"
    missing = sorted(opened - bundled)
    assert not missing, f"the app opened these but the spec does not bundle them: {missing}"


@pytest.mark.slow
def test_spec_excludes_nothing_the_running_app_imports(app_run, spec_calls):
    excluded = {name.split(".")[0] for name in spec_calls["Analysis"].kwargs["excludes"]
                if "." not in name}
    assert not excluded & set(app_run["modules"]), excluded & set(app_run["modules"])
