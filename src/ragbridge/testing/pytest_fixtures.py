"""pytest fixtures for the stub judge. Not registered as a plugin: import them in ``conftest.py``::

    from ragbridge.testing.pytest_fixtures import stub_judge  # noqa: F401

``stub_judge`` is function-scoped and yields a started :class:`~ragbridge.testing.StubJudge`.
Parametrise it indirectly with the constructor's keyword arguments::

    @pytest.mark.parametrize("stub_judge", [{"fault_rate_429": 0.5, "seed": 1}], indirect=True)
    def test_retries(stub_judge): ...

or with a marker: ``@pytest.mark.stub_judge(latency=0.2)``. ``stub_judge_fixture(**defaults)``
makes a fixture with other defaults (``slow_judge = stub_judge_fixture(latency=0.2)``).
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from ragbridge.testing.stub_judge import StubJudge

__all__ = ["stub_judge", "stub_judge_fixture"]


def _kwargs(request: Any, defaults: dict) -> dict:
    kw = dict(defaults)
    marker = request.node.get_closest_marker("stub_judge")
    if marker is not None:
        kw.update(marker.kwargs)
    param = getattr(request, "param", None)
    if isinstance(param, dict):
        kw.update(param)
    elif param is not None:
        raise TypeError("parametrise stub_judge with a dict of StubJudge keyword arguments")
    return kw


def stub_judge_fixture(**defaults: Any):
    """A function-scoped fixture yielding a started StubJudge built with ``defaults``."""

    @pytest.fixture
    def _fixture(request: Any) -> Iterator[StubJudge]:
        with StubJudge(**_kwargs(request, defaults)) as stub:
            yield stub

    return _fixture


stub_judge = stub_judge_fixture()
