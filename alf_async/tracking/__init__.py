"""Runs where labs keep them: MLflow and Weights & Biases (`--tracker`).

A run's TensorBoard summaries stay the source: `forwarder` reads them back
from `root_dir/train` in a background thread and sends them to the tracker
`backends` names, against env steps, with the operative config's bindings,
the provenance tags, `result.json` and the exported policy. A tracker that
fails never stops or slows training.
"""
