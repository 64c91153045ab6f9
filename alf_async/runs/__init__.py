"""A run seen from outside, without TensorFlow: what its `root_dir` holds, by name
(`layout`), its command line (`commands`), its learning curves (`curves`), what
made it (`provenance`), and the one queue that runs many of them (`queue`)."""
