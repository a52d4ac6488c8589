"""Test helpers shipped with ragbridge: a deterministic OpenAI-compatible stub judge.

    from ragbridge.testing import StubJudge
    with StubJudge() as stub:
        ...  # point a judge (or ragbridge's gateway) at stub.base_url

For pytest, import the fixture into your ``conftest.py`` (it is not an auto-loaded plugin)::

    from ragbridge.testing.pytest_fixtures import stub_judge  # noqa: F401
"""

from typing import Any

__all__ = ["StubJudge", "StubJudgeProcess", "StubRequest", "FAULT_KINDS", "embed", "serve"]


def __getattr__(name: str) -> Any:
    # Lazy, so that ``python -m ragbridge.testing.stub_judge`` does not import the module twice.
    if name in __all__:
        from ragbridge.testing import stub_judge

        return getattr(stub_judge, name)
    raise AttributeError(f"module 'ragbridge.testing' has no attribute {name!r}")
