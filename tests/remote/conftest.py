"""In-process learners and actors of these tests share one run secret."""

import pytest

from alf_async.remote import run_secret


@pytest.fixture(autouse=True)
def _one_run_secret(monkeypatch):
    monkeypatch.setenv(run_secret.ENV_VAR, "4242")
