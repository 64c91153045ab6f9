"""`supervision/ray_site`: the private Ray module it patches and the pins it exists for.

If an upgrade moves `ray._common.pydantic_compat`, renames its flag, or lets Ray take
pydantic 1, these fail here, by name, instead of a Ray run failing at its start.
"""

import importlib.metadata
import os
import subprocess
import sys

import pytest

pytest.importorskip("ray")

from alf_async.supervision import ray_site  # noqa: E402

# The pins ray_site exists for (setup.py): Ray refuses the pydantic the trackers install.
RAY_PIN, PYDANTIC_MAJOR = "2.60.0", "1"

IN_A_FRESH_PROCESS = """
import sys
from alf_async.supervision import ray_site
ray = ray_site.import_ray_without_pydantic()
compat = sys.modules["ray._common.pydantic_compat"]
import pydantic
print(compat.PYDANTIC_INSTALLED, compat.pydantic is None, pydantic.VERSION.split(".")[0])
"""


def test_the_pins_it_exists_for_are_those_installed():
    assert importlib.metadata.version("ray") == RAY_PIN
    assert importlib.metadata.version("pydantic").split(".")[0] == PYDANTIC_MAJOR


def test_ray_refuses_this_pydantic_unless_the_check_is_imported_with_pydantic_hidden():
    plain = subprocess.run([sys.executable, "-c", "import ray._common.pydantic_compat"],
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode != 0 and "Pydantic v1 is no longer supported" in plain.stderr
    patched = subprocess.run([sys.executable, "-c", IN_A_FRESH_PROCESS],
                             capture_output=True, text=True, timeout=120)
    assert patched.returncode == 0, patched.stderr
    # Ray's check saw no pydantic; the process still has its own pydantic 1
    assert patched.stdout.split() == ["False", "True", PYDANTIC_MAJOR]


def test_rays_own_processes_find_the_hiding_pydantic_first_and_commands_do_not():
    before = os.environ.get("PYTHONPATH")
    with ray_site.pydantic_hidden():
        hidden = subprocess.run([sys.executable, "-c", "import pydantic"],
                                capture_output=True, text=True, timeout=60)
        restored = ray_site.without_this_folder(os.environ)
    assert hidden.returncode != 0 and "hidden from Ray's processes" in hidden.stderr
    assert ray_site.FOLDER not in restored.get("PYTHONPATH", "").split(os.pathsep)
    assert os.environ.get("PYTHONPATH") == before
