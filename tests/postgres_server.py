"""A throwaway PostgreSQL server on 127.0.0.1 for the tests that need a real database.

The server refuses to run as root, and CI runs as root: the data folder is
given to an unprivileged user (`postgres` where it exists, else `nobody`) and
`initdb` and `postgres` run as that user. Stopped by its PID (a fast shutdown,
SIGKILL after 10 s); the folder is removed.
"""

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

import portpicker


def binaries():
    """The folder of PostgreSQL's `initdb` and `postgres`, or None where they are missing."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


def _user():
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("no unprivileged user to run PostgreSQL as")


class PostgresServer:
    """`start()`, then `url(database)`; `stop()` ends it by its PID."""

    def __init__(self):
        self.bin = binaries()
        self.port = portpicker.pick_unused_port()
        self.folder = tempfile.mkdtemp(prefix="alf_pg_")  # in /tmp: the user reaches it
        self.process = None
        self._as = {}
        if os.geteuid() == 0:
            user = _user()
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self._as = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[])

    def _run(self, *argv):
        subprocess.run([os.path.join(self.bin, argv[0]), *argv[1:]], check=True,
                       capture_output=True, timeout=120, cwd=self.folder, **self._as)

    def start(self, timeout=60):
        data = os.path.join(self.folder, "data")
        self._run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.process = subprocess.Popen(
            [os.path.join(self.bin, "postgres"), "-D", data, "-h", "127.0.0.1",
             "-p", str(self.port), "-k", self.folder],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.folder, "log"), "w"),
            cwd=self.folder, start_new_session=True, **self._as)
        deadline = time.monotonic() + timeout
        while subprocess.run([os.path.join(self.bin, "pg_isready"), "-h", "127.0.0.1", "-p",
                              str(self.port)], capture_output=True, timeout=30).returncode:
            assert self.process.poll() is None, open(os.path.join(self.folder, "log")).read()
            assert time.monotonic() < deadline, "PostgreSQL did not answer"
            time.sleep(0.2)
        return self

    def create_database(self, name):
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return self.url(name)

    def url(self, database):
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)
