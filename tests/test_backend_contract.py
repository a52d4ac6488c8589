"""Every registered backend keeps the backend contract (`ragbridge.testing.contract`): native, the
rubric judge and each library backend, in this process, against the stub judge on 127.0.0.1."""

import pytest

from ragbridge.testing.contract import BackendContract, every_backend


@pytest.mark.parametrize("backend_name", every_backend(), scope="class")
class TestEveryBackend(BackendContract):
    pass
