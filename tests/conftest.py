import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Two logical CPUs, so that the multi-device learner is tested without GPUs.
# This must happen before TensorFlow initialises its devices.
from alf_async.learning.devices import split_host_cpu  # noqa: E402

split_host_cpu(2)
