"""A run seen from outside: what its `root_dir` holds, by name (`layout`), read and
written without TensorFlow."""
