"""`python -m alf_async.chaos`: the chaos command (`run.py`)."""

from alf_async.chaos import run

if __name__ == "__main__":
    run.command()
