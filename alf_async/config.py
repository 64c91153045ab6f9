"""What every command checks first: its gin files and bindings, and its run directory.

Light on purpose (gin and absl only): the actor process and the tools read their
configuration through it without importing the trainer.
"""

import difflib
import hashlib
import json
import logging as std_logging
import os
import re
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import gin
from gin import config_parser
from absl import app, logging

from alf_async import extras, quiet


CONFIG_DIR = "gin_configs"
# absl's help flags; absl exits 1 after printing the help.
HELP_FLAGS = ("-?", "--help", "--helpshort", "--helpfull", "--helpxml")


def check_tf_config(text: str) -> None:
    """Raises ValueError naming `--tf_config` unless `text` is TF_CONFIG's JSON of a
    multi-worker learner: `{"cluster": {"worker": ["HOST:PORT", ...]}, "task":
    {"type": "worker", "index": i}}` with i one of the workers."""
    try:
        value = json.loads(text)
        workers, task = value["cluster"]["worker"], value["task"]
        index = task["index"]
        fine = (isinstance(workers, list) and all(
            isinstance(w, str) and w.rpartition(":")[2].isdigit() for w in workers)
            and task.get("type") == "worker" and isinstance(index, int)
            and 0 <= index < len(workers))
    except (ValueError, TypeError, KeyError):
        fine = False
    if not fine:
        raise ValueError(f'--tf_config must be TF_CONFIG\'s JSON, {{"cluster": {{"worker": '
                         f'["HOST:PORT", ...]}}, "task": {{"type": "worker", "index": i}}}} '
                         f'with i in [0, workers), got {text!r}')


def exit_on_bad_flags(check: Callable[[], None]) -> None:
    """Runs `check()`; a ValueError it raises ends the command: one line, exit 2."""
    try:
        check()
    except ValueError as error:
        kind = "Missing package" if isinstance(error, extras.MissingExtraError) else "Bad setting"
        logging.error("%s: %s", kind, error)
        sys.exit(2)


def run_command(main: Callable) -> None:
    """`absl.app.run(main)`, except that asking for help exits 0."""
    try:
        app.run(main)
    except SystemExit as exit_:
        if exit_.code == 1 and any(arg in HELP_FLAGS for arg in sys.argv[1:]):
            sys.exit(0)
        raise


def check_subcommand(args: Sequence[str], known: Sequence[str], usage: str) -> None:
    """Exits 2 with one line unless `args` starts with one of the `known` subcommands
    (`unknown subcommand 'reprot' (did you mean report?)`)."""
    if args and args[0] in known:
        return
    if not args:
        logging.error("a subcommand is needed; %s", usage)
    else:
        close = difflib.get_close_matches(args[0], known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else f"; {usage}"
        logging.error("unknown subcommand %r%s", args[0], hint)
    sys.exit(2)


def shipped_configs() -> List[str]:
    """The shipped gin files: `gin_configs/*.gin` of the working directory, else of
    the source checkout this package runs from; [] where neither exists."""
    source = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), CONFIG_DIR)
    for folder in (CONFIG_DIR, source):
        if os.path.isdir(folder):
            return sorted(os.path.join(folder, name) for name in os.listdir(folder)
                          if name.endswith(".gin"))
    return []


def gin_bindings(text: str) -> Dict[Tuple[str, str, str], object]:
    """(scope, configurable, parameter) -> value of every binding in gin `text`; the
    configurable without its module, as the operative config may print it."""
    parser = config_parser.ConfigParser(text, gin.config.ParserDelegate(skip_unknown=True))
    return {(s.scope, s.selector.rsplit(".", 1)[-1], s.arg_name): s.value
            for s in parser if isinstance(s, config_parser.BindingStatement)}


def _statements(path: str):
    """The gin statements of the file at `path`, its includes' first (relative to it)."""
    with open(path) as f:
        parser = config_parser.ConfigParser(f.read(), gin.config.ParserDelegate(skip_unknown=True))
    for statement in parser:
        if isinstance(statement, config_parser.IncludeStatement):
            yield from _statements(os.path.join(os.path.dirname(path), statement.filename))
        else:
            yield statement


def extras_needed(path: str) -> List[str]:
    """The pip extras the gin file at `path` needs beyond the base install: its env's
    suite, Reverb (replay, actor processes), EnvPool, TFDS (datasets)."""
    needed = set()
    for statement in _statements(path):
        if not isinstance(statement, config_parser.BindingStatement):
            continue
        name, value = statement.selector.rsplit(".", 1)[-1], statement.value
        if name in ("ReverbService", "ActorProcess") or (
                statement.arg_name == "exp_replayer" and value in ("uniform", "prioritized")):
            needed.add("replay")
        elif statement.arg_name == "exp_replayer" and value in ("dataset", "hybrid"):
            needed.update(["datasets"] + (["replay"] if value == "hybrid" else []))
        elif statement.arg_name == "record_dataset" and value:
            needed.add("datasets")
        elif statement.arg_name == "env_load_fn" and "envpool" in str(value):
            needed.add("envpool")
        elif name == "create_environment" and statement.arg_name == "env_name":
            needed.add(extras.env_extra(value))
    return sorted(filter(None, needed))


def config_summary(path: str) -> str:
    """`name  first sentence of the header  [extras]` for the listing of shipped configs."""
    header = header_sentence(path)
    needs = extras_needed(path)
    return (f"{os.path.basename(path):30s} {header}"
            + (f"  [needs {', '.join(f'.[{e}]' for e in needs)}]" if needs else ""))


def header_sentence(path: str) -> str:
    """The first sentence of a gin file's header comment (which may span lines; it
    ends before an indented command line or the first line that is no comment)."""
    lines = []
    with open(path) as f:
        for line in f:
            text = line.lstrip("#").strip()
            if not line.startswith("#") or line.startswith("#  ") or not text:
                break
            lines.append(text)
    header = " ".join(lines)
    end = re.search(r"(?<!e\.g)(?<!i\.e)\.(\s|$)", header)
    return header[:end.start() + 1] if end else header


def _did_you_mean(path: str) -> str:
    """"; did you mean X?" for the gin file whose name is nearest to the missing
    `path`'s, beside it or shipped; "" where none is near."""
    folder = os.path.dirname(path)
    near = ([os.path.join(folder, name) for name in os.listdir(folder or ".")
             if name.endswith(".gin")] if os.path.isdir(folder or ".") else [])
    by_name = {os.path.basename(p): p for p in shipped_configs() + near}
    close = difflib.get_close_matches(os.path.basename(path), list(by_name), n=1, cutoff=0.8)
    return f"; did you mean {by_name[close[0]]}?" if close else ""


def check_gin_files(gin_files: Sequence[str], required: bool = False) -> None:
    """Raises ValueError naming the first of `gin_files` that is not a file (with the
    nearest gin file's name), or, if `required`, that there is none."""
    if required and not gin_files:
        names = ", ".join(os.path.basename(path) for path in shipped_configs())
        raise ValueError(f"--gin_file is required: a config from {CONFIG_DIR}/"
                         + (f" ({names})" if names else ""))
    for path in gin_files:
        if not os.path.isfile(path):
            raise ValueError(f"--gin_file={path} does not exist{_did_you_mean(path)}")


def parse_config(gin_files: Sequence[str], bindings: Sequence[str]) -> None:
    """Parses gin files, then bindings; a file may `include` its neighbours by name.

    Raises:
        ValueError: a file that does not exist (named as `--gin_file=...`),
            or gin's own error for a bad binding.
    """
    check_gin_files(gin_files)
    for path in gin_files:
        gin.add_config_file_search_path(os.path.dirname(os.path.abspath(path)))
    # gin first looks an included name up as a Python package path and logs the miss
    # as an error before finding it on the search path: held back.
    with quiet.held_back("gin/resource_reader.py", below=std_logging.CRITICAL):
        gin.parse_config_files_and_bindings(list(gin_files), list(bindings))
    _PARSED[:] = list(gin_files)
    _PARSED_BINDINGS[:] = list(bindings)


_PARSED: List[str] = []  # the gin files `parse_config` parsed last (a run's provenance)
_PARSED_BINDINGS: List[str] = []  # and the bindings given after them (`--gin_param`)


def parsed_gin_files() -> List[str]:
    """The gin files this process's `parse_config` parsed last, in order."""
    return list(_PARSED)


def parsed_bindings() -> List[str]:
    """The bindings this process's `parse_config` parsed last, after its files."""
    return list(_PARSED_BINDINGS)


def applied_values(bindings: Sequence[str]) -> Dict[str, float]:
    """`{binding's key: the number gin really passed}` for each of `bindings` (`KEY =
    VALUE` or a bare key; a macro's too), read from gin's operative config: a key whose
    configurable was never called, or whose caller passed that parameter itself, is
    absent, as is a value that is not a number."""
    wanted = {}
    for binding in bindings:
        key = binding.split("=", 1)[0].strip()
        try:
            wanted[_binding_key(key)] = key
        except ValueError:
            continue  # not a binding of a registered configurable
    found = {}
    statements = config_parser.ConfigParser(gin.operative_config_str(),
                                            gin.config.ParserDelegate(skip_unknown=True))
    for statement in statements:
        if not isinstance(statement, config_parser.BindingStatement):
            continue
        scope = f"{statement.scope}/" if statement.scope else ""
        name = f"{scope}{statement.selector}"  # a macro's (`W = 64`), arg_name empty
        key = wanted.get(_binding_key(f"{name}.{statement.arg_name}" if statement.arg_name
                                      else name))
        number = isinstance(statement.value, (int, float)) and not isinstance(statement.value,
                                                                               bool)
        if key and number:
            found[key] = statement.value
    return found


def _binding_key(key: str) -> Tuple[Tuple[str, str], str]:
    """`((scope, complete selector), parameter)` of a binding's key, `(("", name), "")`
    of a macro's (ValueError: neither)."""
    if "." not in key:
        return ("", key), ""
    parsed = gin.config.ParsedBindingKey.parse(key)
    return parsed.config_key, parsed.arg_name


def check_writable(root_dir: str) -> str:
    """Creates `root_dir` if needed; raises ValueError if it is not writable.

    Returns:
        `root_dir` as an absolute path.
    """
    root_dir = os.path.abspath(os.path.expanduser(root_dir))
    try:
        os.makedirs(root_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=root_dir):
            pass
    except OSError as error:
        raise ValueError(f"root_dir={root_dir!r} is not writable: {error.strerror}") from None
    return root_dir


def gin_digests(gin_files: Sequence[str]) -> Tuple[Optional[str], ...]:
    """The sha256 of each gin file's content (its includes are not followed; None
    for a file that is not there: the commands check that before)."""
    digests = []
    for path in gin_files:
        try:
            with open(path, "rb") as f:
                digests.append(hashlib.sha256(f.read()).hexdigest())
        except FileNotFoundError:
            digests.append(None)
    return tuple(digests)


def project_version() -> Optional[str]:
    """The git commit of the checkout this package runs from (`+dirty` with local
    changes), or None where it is not a git checkout."""
    source = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(source, ".git")):
        return None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=source, capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def run_tags(root_dir: str, gin_files: Sequence[str]) -> Dict[str, str]:
    """A run's provenance as a tracker's tags, the same a cell's `cell.json` holds: the
    commit, the gin files with their sha256, and the run's root_dir."""
    return {"commit": project_version() or "unknown", "gin_files": ",".join(gin_files),
            "gin_sha256": ",".join(d or "missing" for d in gin_digests(gin_files)),
            "root_dir": os.path.abspath(root_dir)}
