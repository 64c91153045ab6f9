"""`RayReports`: Ray's own `(raylet)` reports go to a file, one launch line each."""

import types

from alf_async.supervision.ray_reports import RayReports


def _worker_module(printed):
    return types.SimpleNamespace(
        print_to_stdstream=lambda data, ignore_prefix=False: printed.append(data))


def test_a_report_goes_to_the_file_whole_and_the_console_gets_one_line(tmp_path, caplog):
    caplog.set_level("WARNING", logger="absl")
    printed, path = [], tmp_path / "logs" / "ray.log"
    module = _worker_module(printed)
    assert RayReports(str(path)).install(module)
    dump = ["\x1b[33m(raylet)\x1b[0m Raylet is terminated. Termination is unexpected.\n"
            "    [state-dump] NodeManager: 12 leases\n", "    [state-dump] DebugString() 0\n"]
    module.print_to_stdstream({"lines": dump, "pid": "raylet", "is_err": False},
                              ignore_prefix=False)
    assert printed == []  # nothing of it on the console but the launch's line
    text = path.read_text()
    assert "(raylet) Raylet is terminated." in text and "\x1b[" not in text
    assert text.count("[state-dump]") == 2
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"launch: Ray reports: (raylet) Raylet is terminated. Termination is "
                     f"unexpected. (whole in {path})"]


def test_other_output_is_printed_as_ray_would_and_a_ray_without_the_name_is_left_alone(
        tmp_path):
    printed = []
    module = _worker_module(printed)
    RayReports(str(tmp_path / "ray.log")).install(module)
    worker_lines = {"lines": ["hello"], "pid": 42, "is_err": False}
    module.print_to_stdstream(worker_lines)
    assert printed == [worker_lines] and not (tmp_path / "ray.log").exists()
    assert not RayReports(str(tmp_path / "ray.log")).install(types.SimpleNamespace())


def test_a_long_first_line_is_cut_for_the_console(tmp_path, caplog):
    caplog.set_level("WARNING", logger="absl")
    module = _worker_module([])
    RayReports(str(tmp_path / "ray.log")).install(module)
    module.print_to_stdstream({"lines": ["x" * 500], "pid": "raylet"})
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("launch: Ray reports: " + "x" * 157 + "...")


def test_reports_that_begin_alike_are_named_once_and_all_kept(tmp_path, caplog):
    caplog.set_level("WARNING", logger="absl")
    module = _worker_module([])
    RayReports(str(tmp_path / "ray.log")).install(module)
    for attempt in range(3):
        module.print_to_stdstream({"lines": [f"Task CommandHost.poll failed.\n try {attempt}"],
                                   "pid": "raylet"})
    module.print_to_stdstream({"lines": ["Raylet is terminated."], "pid": "raylet"})
    assert [r.getMessage().split(" (whole")[0] for r in caplog.records] == [
        "launch: Ray reports: Task CommandHost.poll failed.",
        "launch: Ray reports: Raylet is terminated."]
    assert (tmp_path / "ray.log").read_text().count("Task CommandHost.poll failed.") == 3
