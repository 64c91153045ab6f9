"""A run seen from outside, without TensorFlow: what its `root_dir` holds, by name
(`layout`), and the one queue that runs many of them (`queue`)."""
