"""killers.py: labellers that kill their own worker process once, in the
middle of a job, to test what Ray does then. Imported by the workers (the
test cluster puts this directory on their PYTHONPATH).

The first worker to rename FLAG to FLAG.taken (an atomic rename: exactly one
wins) writes its pid there and SIGKILLs itself: no clean-up, no exception,
as when a machine's kernel or a preemption kills it."""

import os
import signal

import sqlite_sentiment.ray as sr


def _claim(flag):
    try:
        os.rename(flag, flag + ".taken")
    except FileNotFoundError:
        return False
    with open(flag + ".taken", "w") as f:
        f.write(str(os.getpid()))
    return True


class KillOnceLabeller(sr.Labeller):
    """Labels a batch, then, on its worker's kill_at-th batch, dies before
    handing the batch back (the work is lost and must be redone)."""

    def __init__(self, *a, kill_flag, kill_at=3, **kw):
        super().__init__(*a, **kw)
        self.kill_flag, self.kill_at, self.batches = kill_flag, kill_at, 0

    def __call__(self, batch):
        out = super().__call__(batch)
        self.batches += 1
        if self.batches >= self.kill_at and _claim(self.kill_flag):
            os.kill(os.getpid(), signal.SIGKILL)
        return out


class KillOnceShardLabeller(sr.ShardLabeller):
    """Dies after the first committed chunk of a file: the file has a
    half-written staging table, and no output table."""

    def __init__(self, *a, kill_flag, **kw):
        super().__init__(*a, **kw)
        self.kill_flag = kill_flag

    def on_chunk(self, path, rows_done):
        if _claim(self.kill_flag):
            os.kill(os.getpid(), signal.SIGKILL)
