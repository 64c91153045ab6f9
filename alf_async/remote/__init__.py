"""Collection on other hosts: actor processes that talk to the learner through Reverb.

```
 python -m alf_async.actor --task=K  (any host, any number)
   a LocalCollection (env threads + actor threads) under a Collector, no learner
   | ActorProcess: every [T, B] unroll, with its task and a global env id,
   | goes to the Reverb queue table 'unrolls' (bounded flushes: backpressure)
   v
 Reverb server in the learner process (python -m alf_async.train --serve_port=P)
   | UnrollReaderThread (a RemoteCollection's) -> the learn queue and log queue, as local
   | env threads would -> get_training_exps() / run_async(), unchanged
   |
   | WeightsPublisherThread: the algorithm's variables and the policy version
   v into the table 'weights' at start and every `publish_interval` updates
 WeightsPuller (in each actor process): pulls them every few seconds or
   unrolls, in the background, and assigns them to its copy of the algorithm.
```

Needs dm-reverb (`pip install '.[distributed]'`), imported only when a
server or client is built. `ActorProcess` and `ReverbService` are imported on
first use (PEP 562), which registers their gin configurables; the light
`learner_watch` needs no TensorFlow.
"""

import importlib

_HOMES = {"ActorProcess": "actor_process", "ReverbService": "service"}
__all__ = sorted(_HOMES)


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
