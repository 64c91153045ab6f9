"""The package as installed: `alf_async/__init__.py`'s interrupt handler for `python -m
alf_async.<command>`, what start-up imports, and the package's folders and top."""

import os
import subprocess
import sys

CODE = """
import contextlib, io, signal
import alf_async
with contextlib.redirect_stderr(io.StringIO()):  # as while the old gym is imported
    alf_async._exit_on_interrupt(signal.SIGINT, None)
"""


def test_the_interrupt_line_reaches_the_terminal_while_stderr_is_redirected():
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 130
    assert result.stderr.strip().splitlines()[-1] == "Interrupted by SIGINT: exiting"


SETUPTOOLS_LATER = """
import sys
import alf_async.train
import distutils.version
print("setuptools" in sys.modules, "site-packages" in distutils.__file__)
import setuptools
print(type(setuptools).__name__)
"""


def test_start_up_leaves_setuptools_unimported_and_a_later_import_of_it_quiet():
    result = subprocess.run([sys.executable, "-W", "always", "-c", SETUPTOOLS_LATER],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "module"]
    assert "distutils" not in result.stderr.lower()


def test_every_folder_of_the_package_is_a_package_that_pip_installs():
    """A folder without its `__init__.py` (one a `.gitignore` pattern hid from git, say)
    still imports from a checkout, as a namespace package, but `pip install .` leaves it
    out: the installed commands then fail where the tests pass."""
    import setuptools  # pylint: disable=import-outside-toplevel
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folders = {os.path.relpath(folder, root).replace(os.sep, ".")
               for folder, _, names in os.walk(os.path.join(root, "alf_async"))
               if any(name.endswith(".py") for name in names)}
    installed = set(setuptools.find_packages(root, include=["alf_async", "alf_async.*"]))
    assert folders == installed, folders ^ installed


def test_the_package_top_holds_at_most_16_modules():
    """The top of `alf_async/` is its commands and the few records every floor shares; a
    module of one part belongs in that part's folder (a newcomer reads the top first)."""
    top = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "alf_async")
    modules = sorted(name for name in os.listdir(top) if name.endswith(".py"))
    assert len(modules) <= 16, modules


def test_every_test_module_has_a_basename_of_its_own():
    """tests/ has no __init__.py: pytest imports each test file by its basename, and a
    second file of the same name fails the whole collection."""
    tests = os.path.dirname(os.path.abspath(__file__))
    seen = {}
    for folder, _, files in os.walk(tests):
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                seen.setdefault(name, []).append(os.path.relpath(os.path.join(folder, name),
                                                                 tests))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def _import_units():
    """The package's import units (a top module or a top folder) and, for each, the units
    its modules import (at the top or inside a function: a lazy import is one too)."""
    import ast  # pylint: disable=import-outside-toplevel
    top = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "alf_async")
    units = {name[:-3] if name.endswith(".py") else name for name in os.listdir(top)
             if name.endswith(".py") or os.path.isfile(os.path.join(top, name, "__init__.py"))}
    units.discard("__init__")
    imports = {unit: set() for unit in units}
    for folder, _, names in os.walk(top):
        for name in (n for n in names if n.endswith(".py")):
            path = os.path.join(folder, name)
            unit = os.path.relpath(path, top).split(os.sep)[0].replace(".py", "")
            if unit not in units:
                continue
            for node in ast.walk(ast.parse(open(path).read())):
                modules = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                           [f"{node.module}.{a.name}" for a in node.names]
                           if isinstance(node, ast.ImportFrom) and node.module else [])
                for module in modules:
                    parts = module.split(".")
                    if parts[0] == "alf_async" and len(parts) > 1 and parts[1] in units:
                        imports[unit].add(parts[1])
            imports[unit].discard(unit)
    return imports


def test_the_import_graph_has_at_most_9_floors_and_no_cycle():
    """Floor 1 imports no other unit of the package; a unit stands one floor above the
    highest it imports. Nine floors: a newcomer follows any import chain down in nine steps."""
    imports, floors = _import_units(), {}

    def floor(unit, path=()):
        assert unit not in path, f"an import cycle: {' -> '.join(path + (unit,))}"
        if unit not in floors:
            floors[unit] = 1 + max((floor(u, path + (unit,)) for u in imports[unit]), default=0)
        return floors[unit]

    highest = max(floor(unit) for unit in imports)
    assert highest <= 9, sorted(floors.items(), key=lambda item: -item[1])
    assert floors["runs"] <= 3 and floors["errors"] <= 2, floors


RUNS_WITHOUT_TF = """
import pkgutil, importlib, sys
import alf_async.runs as runs
names = [m.name for m in pkgutil.iter_modules(runs.__path__)]
for name in names:
    importlib.import_module("alf_async.runs." + name)
print(len(names), "tensorflow" in sys.modules)
"""


def test_the_runs_wing_imports_without_tensorflow():
    """`alf_async.runs` is what the experiment, chaos, PBT and report commands read before
    (or without) their heavy imports: a TensorFlow import there costs each of them seconds."""
    result = subprocess.run([sys.executable, "-c", RUNS_WITHOUT_TF], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    count, tensorflow = result.stdout.split()
    assert int(count) >= 5 and tensorflow == "False", result.stdout
