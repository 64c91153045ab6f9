"""`ReverbTable`: a `ReplayTable` in a Reverb server of this process."""

import os
from typing import Any, Callable, Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

from alf_async import extras, quiet
from alf_async.batches.packing import ColumnPacking
from alf_async.batches.table import SampledItems, TableSettings


def check_saved_copies(checkpoint_dir: str) -> None:
    """Checks the copies of a buffer saved in `checkpoint_dir` before Reverb loads it.

    Reverb writes a copy's `DONE` file last and resumes from the newest copy
    that has one: a copy torn by a kill mid-write is passed over, here with
    one warning line. Copies without any complete one would make Reverb
    start an empty buffer silently: that raises instead.

    Raises:
        ValueError: copies exist but none is complete (one line).
    """
    if not os.path.isdir(checkpoint_dir):
        return
    copies = sorted(path for path in (os.path.join(checkpoint_dir, name)
                                      for name in os.listdir(checkpoint_dir))
                    if os.path.isdir(path))  # named by their time: sorted, oldest first
    complete = [path for path in copies if os.path.exists(os.path.join(path, "DONE"))]
    for path in copies:
        if path not in complete and (not complete or path > complete[-1]):
            logging.warning("ReplayBuffer.save_buffer: the copy %s is torn (no DONE file: "
                            "a kill mid-write); passed over", path)
    if copies and not complete:
        raise ValueError(f"ReplayBuffer.save_buffer: none of the {len(copies)} copies of the "
                         f"buffer in {checkpoint_dir} is complete; move them away to start "
                         f"with an empty buffer")


class ReverbTable:
    """Items in one Reverb table served in this process (a `table.ReplayTable`).

    Each item is stored as one Reverb column per dtype (`ColumnPacking`:
    Reverb's cost per item grows with its columns). The oldest items leave
    first (`Fifo`); sampling is `Uniform` or `Prioritized`; a
    `SampleToInsertRatio` rate limiter holds the settings' rate. A batch is
    sampled by a `TrajectoryDataset` that cuts it (`cut`) inside its
    pipeline, so that the sampling thread makes one call per batch. With a
    `checkpoint_dir` the server saves there and resumes from the newest
    complete copy (priorities and the rate limiter included).

    Thread-safety: as `ReplayTable`.
    """

    NAME = "replay"  # the Reverb table (uniform or prioritized sampling)
    _POLL_MS = 200  # longest a wait goes without checking for a stop

    def __init__(self, item_spec: Any, settings: TableSettings, cut: Callable,
                 checkpoint_dir: Optional[str] = None):
        self._reverb = extras.import_reverb("AsyncOffPolicyDriver.exp_replayer='uniform'")
        self._packing = ColumnPacking(item_spec)
        self._prioritized = settings.priority_alpha is not None
        self.checkpoint_dir = checkpoint_dir
        table = self._table(settings)
        self._server = self._serve(table)
        self.address = f"127.0.0.1:{self._server.port}"
        self._client = self._reverb.Client(self.address)
        self.restored_items = self._check_restored(table)
        self._writer = self._client.trajectory_writer(num_keep_alive_refs=1)
        self._samples = None  # the dataset's iterator, made by the sampling thread
        self.sample_timeouts = 0
        self._dataset = self._sampled_dataset(cut, settings.items_per_batch)

    def _table(self, settings: TableSettings):
        reverb = self._reverb
        return reverb.Table(
            self.NAME, remover=reverb.selectors.Fifo(),
            sampler=(reverb.selectors.Prioritized(settings.priority_alpha)
                     if self._prioritized else reverb.selectors.Uniform()),
            max_size=settings.max_items, signature=self._packing.spec,
            rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
                settings.samples_per_insert, settings.min_items, settings.error_buffer))

    def _sampled_dataset(self, cut: Callable, items_per_batch: int):
        """The table's items, `items_per_batch` at a time, cut inside the pipeline.
        Its elements are flat (tf.data would turn the lists of a policy state into
        tuples); `_sampled_structure` is their structure, `(cut, info)`, set when
        `map` traces."""
        self._sampled_structure = None

        def cut_sampled(sample):
            cut_sample = (cut(self._packing.unpack(sample.data)), sample.info)
            self._sampled_structure = tf.nest.map_structure(lambda _: 0, cut_sample)
            return tuple(tf.nest.flatten(cut_sample))

        return extras.trajectory_dataset(
            self._reverb, self.address, self.NAME, max_in_flight_samples_per_worker=items_per_batch,
            rate_limiter_timeout_ms=self._POLL_MS).batch(
                items_per_batch, drop_remainder=True).map(cut_sampled)

    def _serve(self, table):
        """The Reverb server of `table`, resumed from the buffer saved in
        `checkpoint_dir` if any (`check_saved_copies`); a saved copy that cannot
        be read is one line (ValueError), not a traceback."""
        reverb = self._reverb
        if not self.checkpoint_dir:
            with quiet.native_stderr_held():  # Reverb: "Started replay server on port ..."
                return reverb.Server([table])
        check_saved_copies(self.checkpoint_dir)
        try:
            with quiet.native_stderr_held():
                return reverb.Server([table], checkpointer=reverb.checkpointers.
                                     DefaultCheckpointer(self.checkpoint_dir))
        except RuntimeError as error:
            raise ValueError(f"ReplayBuffer.save_buffer: the buffer saved in "
                             f"{self.checkpoint_dir} cannot be read ({str(error).splitlines()[0]})"
                             f"; move it away to start with an empty buffer") from None

    def _check_restored(self, table) -> int:
        """The number of items restored from `checkpoint_dir` (0: none);
        raises ValueError if they were saved under other settings."""
        info = self._client.server_info()[self.NAME]
        if not info.current_size:
            return 0
        describe = lambda info: (
            info.max_size, str(info.sampler_options), info.rate_limiter_info.samples_per_insert,
            info.rate_limiter_info.min_size_to_sample,
            [(s.shape, s.dtype) for s in tf.nest.flatten(info.signature)])
        if describe(info) != describe(table.info):
            self._stop_server()
            raise ValueError(
                f"ReplayBuffer.save_buffer: the buffer saved in {self.checkpoint_dir} was made "
                f"with other replay settings or specs (capacity, replay_ratio, min_size, "
                f"priorities, unroll_length or the env's); delete it or restore those settings")
        logging.info("Resumed the replay buffer from %s: %d segments", self.checkpoint_dir,
                     info.current_size)
        return info.current_size

    def insert(self, items: Sequence[Any], priorities: Sequence[float],
               should_stop: Callable[[], bool]) -> bool:
        """Stores numpy items; waits while the rate limiter holds insertion.

        Returns:
            True once they are stored; False if `should_stop()` turned true
            while waiting.
        """
        for item, priority in zip(items, priorities):
            self._writer.append(self._packing.pack(item))
            self._writer.create_item(self.NAME, priority, tf.nest.map_structure(
                lambda column: column[-1], self._writer.history))
        while not should_stop():
            try:
                self._writer.flush(timeout_ms=self._POLL_MS)
            except self._reverb.errors.DeadlineExceededError:
                continue
            return True
        return False

    def sample(self, should_stop: Callable[[], bool]):
        """Waits for a batch: `(cut items, SampledItems if prioritized else None)`;
        None if `should_stop()` turned true first."""
        while not should_stop():
            if self._samples is None:
                with quiet.native_stderr_held():  # Reverb: "... accessed directly without gRPC"
                    self._samples = iter(self._dataset)
            try:
                cut, info = tf.nest.pack_sequence_as(self._sampled_structure,
                                                     list(next(self._samples)))
            except (StopIteration, tf.errors.OutOfRangeError):  # the rate limiter's timeout
                self._samples = None
                self.sample_timeouts += 1
                continue
            items = None
            if self._prioritized:
                items = SampledItems(*[x.numpy() for x in (
                    info.key, info.probability, info.table_size)])
            return cut, items
        return None

    def update_priorities(self, keys: np.ndarray, priorities: np.ndarray) -> None:
        """Sets the priorities of items by key (items evicted since are skipped)."""
        self._client.mutate_priorities(self.NAME, updates=dict(
            zip(keys.tolist(), np.asarray(priorities, np.float64).tolist())))

    def save(self) -> Optional[str]:
        """With a `checkpoint_dir`, writes the table there (replacing the previous
        copy) and returns the copy's path; else returns None."""
        if not self.checkpoint_dir:
            return None
        with quiet.native_stderr_held():  # Reverb: "Stored checkpoint to ..." (ours follows)
            path = self._client.checkpoint()
        size = sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))
        logging.info("Saved the replay buffer (%.1f MiB) to %s", size / 2**20, path)
        return path

    def close(self) -> None:
        """Saves the table (with a `checkpoint_dir`), stops the server and closes the
        sampler; call once no thread inserts or samples."""
        self._writer.close()
        self.save()
        self._stop_server()
        # The sampler closes now, in this thread, not whenever the garbage collector
        # finds it: its destructor waits for its worker while holding the GIL, which
        # stalls every Python thread of the process (up to seconds, at any point).
        self._samples = None

    def _stop_server(self) -> None:
        with quiet.native_stderr_held():  # Reverb: "Shutting down replay server"
            self._server.stop()
