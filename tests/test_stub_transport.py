"""The stub judge answering in process (`StubTransport`) answers as it does on its socket: the
same status, headers and body for every route, dialect and injected fault, the same requests recorded,
to the openai SDK's clients too; what only a connection shows is refused."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from conftest import library
from ragbridge.testing import StubJudge
from ragbridge.testing.stub_transport import StubTransport

openai = library("openai")

CHAT = {"model": "stub-judge",
        "messages": [{"role": "user", "content": "Is the answer faithful? Reply yes or no."}]}
SCHEMA = {"type": "json_schema", "json_schema": {"name": "verdict", "strict": True, "schema": {
    "type": "object", "properties": {"verdict": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["verdict"], "additionalProperties": False}}}
REQUESTS = [
    ("GET", "/v1/models", None, {}),
    ("POST", "/v1/chat/completions", CHAT, {}),
    ("POST", "/v1/chat/completions", {**CHAT, "response_format": SCHEMA}, {}),
    ("POST", "/v1/responses", {"model": "m", "input": "Reply with one word."}, {}),
    ("POST", "/v1/embeddings", {"model": "e", "input": ["refunds in 14 days", "shipping"]}, {}),
    ("POST", "/v1/nowhere", {}, {}),
    ("POST", "/azure/openai/deployments/d/chat/completions?api-version=2024-10-21", CHAT, {"api-key": "k"}),
    ("POST", "/azure/openai/deployments/d/chat/completions?api-version=2024-10-21", CHAT, {}),  # no key
    ("POST", "/ollama/v1/chat/completions", CHAT, {}),
]


def _same(a: httpx.Response, b: httpx.Response) -> None:
    """The same answer; an injected 500 names its request (as a real server's), so that name aside."""
    def seen(r: httpx.Response) -> tuple:
        assert int(r.headers["content-length"]) == len(r.content)
        return (r.status_code, re.sub(rb"\(injected\) [0-9.]+", b"(injected) N", r.content),
                {k: v for k, v in r.headers.items() if k not in ("date", "content-length")})

    assert seen(a) == seen(b)


@pytest.mark.parametrize("fault", [None, "429", "500", "malformed", "garbage"])
def test_every_route_dialect_and_fault_is_answered_as_on_the_socket(fault):
    with StubJudge(retry_after=2) as stub, httpx.Client(base_url=stub.url) as net, \
            httpx.Client(base_url=stub.url, transport=StubTransport(stub)) as here:
        for method, path, body, headers in REQUESTS:
            answers = []
            for client in (net, here):
                stub.reset()
                stub.inject(fault)
                answers.append(client.request(method, path, json=body, headers=headers))
                answers.append([(r.method, r.path, r.body, r.fault, r.headers, r.dialect)
                                for r in stub.requests])
            _same(answers[0], answers[2])
            assert answers[1] == answers[3], path


def test_the_openai_clients_work_over_it_without_a_socket():
    stub = StubJudge()  # never started: no socket at all
    client = openai.OpenAI(base_url=stub.base_url, api_key="k", max_retries=0,
                           http_client=httpx.Client(transport=StubTransport(stub)))
    reply = client.chat.completions.create(model="stub-judge", messages=CHAT["messages"])
    assert reply.model == "ragbridge-stub/stub-judge" and reply.choices[0].message.content

    async def ask():
        async with httpx.AsyncClient(transport=StubTransport(stub)) as http:
            aclient = openai.AsyncOpenAI(base_url=stub.base_url, api_key="k", max_retries=0, http_client=http)
            return await asyncio.gather(*(aclient.embeddings.create(model="e", input=f"text {i}")
                                          for i in range(4)))

    vectors = asyncio.run(ask())
    assert len({tuple(v.data[0].embedding) for v in vectors}) == 4
    assert stub.request_count == 5


def test_what_only_a_connection_shows_is_refused():
    stub = StubJudge()
    with httpx.Client(transport=StubTransport(stub)) as here, pytest.raises(httpx.UnsupportedProtocol):
        here.post(stub.url + "/hostile/drip/v1/chat/completions", json=CHAT)
