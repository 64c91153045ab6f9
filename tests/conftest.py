import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Every Ray a test starts (in this process or in a launch) binds and reaches 127.0.0.1
# only, reports no usage statistics and asks no cloud metadata server: set before
# anything imports ray.
from alf_async.supervision.ray_backend import LOCAL_RAY_ENV  # noqa: E402

os.environ.update(LOCAL_RAY_ENV)

# Two logical CPUs, so that the multi-device learner is tested without GPUs.
# This must happen before TensorFlow initialises its devices.
from alf_async.learning.devices import split_host_cpu  # noqa: E402

split_host_cpu(2)
