"""`python -m alf_async.actor`: the actor process of a remote learner.

Kept at this name for the command line; the implementation and its flags are
in `alf_async.remote.actor_cli`.
"""

from absl import app

from alf_async.remote.actor_cli import main

if __name__ == "__main__":
    app.run(main)
