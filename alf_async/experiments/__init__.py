"""Experiments on top of ordinary training runs: cells and seeds, their launcher,
reports (`python -m alf_async.experiment`) and hyper-parameter search
(`python -m alf_async.tune`)."""
