"""Hides pydantic from the processes of a Ray the launch starts (on their PYTHONPATH).

Ray 2.60 refuses pydantic 1 at import ("Pydantic v1 is no longer supported"),
while mlflow and wandb, beside tf-agents' typing-extensions pin, install only
pydantic 1. Plain Ray runs without pydantic: this makes its processes see none.
"""

raise ImportError("pydantic is hidden from Ray's processes (alf_async.supervision.ray_site)")
