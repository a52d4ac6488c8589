"""Test helpers shipped with ragbridge: a deterministic OpenAI-compatible stub judge.

    from ragbridge.testing import StubJudge
    with StubJudge() as stub:
        ...  # point a judge (or ragbridge's gateway) at stub.base_url

For pytest, import the fixture into your ``conftest.py`` (it is not an auto-loaded plugin)::

    from ragbridge.testing.pytest_fixtures import stub_judge  # noqa: F401
"""

from ragbridge.testing.stub_judge import FAULT_KINDS, StubJudge, StubRequest, embed, serve

__all__ = ["StubJudge", "StubRequest", "FAULT_KINDS", "embed", "serve"]
