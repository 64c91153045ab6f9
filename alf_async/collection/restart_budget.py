"""How many faults a run survives: a restart budget over a sliding window.

Shared by what rebuilds after a fault: env threads replacing an env that
raised (`LocalCollection.max_env_restarts`) and the launch restarting a
process that died (`--max_restarts`).
"""

import collections
import threading
import time
from typing import Optional


class RestartBudget:
    """At most `max_restarts` restarts within any `window_secs`.

    Thread-safety: `allow()` may be called from any thread.
    """

    def __init__(self, max_restarts: int, window_secs: float, setting: str = "max_restarts"):
        """
        Args:
            max_restarts: restarts allowed within the window (>= 0).
            window_secs: the window, in seconds (> 0).
            setting: the setting's name, for errors and `describe()`.
        """
        if max_restarts < 0:
            raise ValueError(f"{setting} must be >= 0, got {max_restarts}")
        if window_secs <= 0:
            raise ValueError(f"the window of {setting} must be > 0 s, got {window_secs}")
        self.max_restarts, self.window_secs, self.setting = max_restarts, window_secs, setting
        self._times = collections.deque()
        self._lock = threading.Lock()

    def allow(self, now: Optional[float] = None) -> bool:
        """Counts a restart at `now` (monotonic seconds) if the budget allows it."""
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._times and now - self._times[0] > self.window_secs:
                self._times.popleft()
            if len(self._times) >= self.max_restarts:
                return False
            self._times.append(now)
            return True

    def describe(self) -> str:
        return f"{self.setting}={self.max_restarts} restarts in {self.window_secs:.0f} s"
