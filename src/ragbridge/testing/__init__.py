"""Test helpers shipped with ragbridge: a deterministic OpenAI-compatible stub judge, and the backend
contract kit a plugin's tests run.

    from ragbridge.testing import StubJudge
    with StubJudge() as stub:
        ...  # point a judge (or ragbridge's gateway) at stub.base_url

For pytest, import the fixture into your ``conftest.py`` (it is not an auto-loaded plugin)::

    from ragbridge.testing.pytest_fixtures import stub_judge  # noqa: F401

A backend plugin's tests subclass ``ragbridge.testing.contract.BackendContract`` (the contract every
backend keeps); ``plugin_registered(module)`` registers a plugin in the test process, as if installed.
"""

import importlib
from typing import Any

#: the names, and the module each is imported from when first used (lazily, so that ``python -m
#: ragbridge.testing.stub_judge`` does not import that module twice)
_EXPORTS = {name: "ragbridge.testing.stub_judge"
            for name in ("StubJudge", "StubJudgeProcess", "StubRequest", "FAULT_KINDS", "embed", "serve")}
_EXPORTS["plugin_registered"] = "ragbridge.testing.contract"

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ragbridge.testing' has no attribute {name!r}")
