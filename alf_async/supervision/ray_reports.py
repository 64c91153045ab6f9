"""Ray's own error reports, kept off the launch's console.

A Ray driver prints what its cluster reports (a host's task retried, a
raylet that died and its last state dump: dozens of lines around one lost
node) on its console, prefixed `(raylet)`, whatever `log_to_driver` says. The
launch's console should read as the local backend's: restarts, the learner's
progress, one line per fault. `RayReports` writes each report whole to a file
(`root_dir/logs/ray.log`) and logs one line that names it (once per minute
for reports that begin alike: a lost node brings several of each).

It replaces `ray._private.worker.print_to_stdstream`, which Ray's driver
thread `listen_error_messages` calls for each report (`pid` "raylet"), a
private name of the Ray this package pins (`ray==2.60.0`): where it is
missing, nothing is replaced and Ray prints as before.

Thread-safety: Ray calls `route` from its one listening thread.
"""

import os
import re
import time

from absl import logging

_COLOR = re.compile(r"\x1b\[[0-9;]*m")
_LINE_CHARS = 160  # the console line's share of a report
_REPEAT_SECS = 60.0  # a report like one named this recently is only written to the file


class RayReports:
    """Routes the `(raylet)` reports of a Ray driver to `path`, one console line each."""

    def __init__(self, path: str):
        self.path = path
        self._print = None
        self._named = {}  # a report's console line: when it was last logged

    def install(self, worker_module) -> bool:
        """Routes the reports of `worker_module` (`ray._private.worker`); False when it
        has no `print_to_stdstream` to replace."""
        self._print = getattr(worker_module, "print_to_stdstream", None)
        if self._print is None:
            return False
        worker_module.print_to_stdstream = self.route
        return True

    def route(self, data: dict, ignore_prefix: bool = False) -> None:
        """Ray's `print_to_stdstream(data, ignore_prefix)`: a report is written to the
        file and named in one line; anything else printed as Ray would."""
        if data.get("pid") != "raylet":
            self._print(data, ignore_prefix)
            return
        lines = [_COLOR.sub("", line) for line in data.get("lines", [])]
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path, "a") as out:
            out.write("".join(line if line.endswith("\n") else line + "\n" for line in lines))
        first, now = _first_line(lines), time.monotonic()
        if now - self._named.get(first, -_REPEAT_SECS) >= _REPEAT_SECS:
            self._named[first] = now
            logging.warning("launch: Ray reports: %s (whole in %s)", first, self.path)


def _first_line(lines) -> str:
    first = next((line.strip() for text in lines for line in text.splitlines()
                  if line.strip()), "")
    return first if len(first) <= _LINE_CHARS else first[:_LINE_CHARS - 3] + "..."
