"""What the stub judge answers: a registry of deterministic, lexically grounded responders.

Every responder gets a `JudgeRequest` (the request normalised: the messages as plain text, the JSON
schema the caller asked for, if any, and where it came from) and returns a `JudgeReply` (message
text, or function-call arguments when the caller forced a tool), or ``None`` to let the next
responder try. The registered responders are tried in order; `generic` comes last and always answers.

The verdicts come from the toy judge (`toy_judge`: word overlap, so a faithful answer scores higher
than an unfaithful one and the same request always gets the same answer); a score on a scale
``lo..hi`` is ``lo + round(fraction * (hi - lo))`` of the matching fraction (`scaled`). With
``StubJudge(noise=p)`` the verdicts and levels are noisy on purpose (`noise`).

This package knows no evaluation library. A backend plugin whose prompts the stub should answer
registers its own responder through the ``ragbridge_register_stub_responders`` hook (asked once, at
the first answer). A responder recognises its library's requests by what the library itself puts in
them, preferably the structured-output schema it sends (``response_format`` / ``tools``: its name and
field names, `JudgeRequest.schema_name`, `JudgeRequest.schema`), not by prose that changes between
the library's versions. It works out *which text is judged against which* and leaves the rest to the
public names here, one module per concern:

* `request`: `JudgeRequest`, `JudgeReply`; `registry`: `register`, `unregister`, `responders`,
  `respond`;
* `toy_judge`: `content_words`, `numbers`, `support`, `is_supported`, `relevance`, `is_relevant`,
  `usefulness`, `is_noncommittal`, `split_sentences`, `best_sentence`, `make_question`, `short`;
* `noise`: `perturbed`, `noisy`, `noisy_level`;
* `judged`: `Ctx` (the query, the evidence, the subject, the items and how each is judged), `scaled`;
* `prompt_text`: `Labels` (the names that introduce each text; `SECTION_LABELS`, `INPUT_KEYS` are the
  generic ones, which a plugin extends with its library's), `labelled_sections`, `ctx_from_sections`,
  `ctx_from_inputs`, `parse_list`, `json_after`, `schema_in_prompt`, `example_json`,
  `schema_from_example`, `find_range`;
* `fill`: `fill_schema` (a schema-valid value filled from a `Ctx`), `reply_json`;
* `json_schema`: `validate_schema`, `SchemaError`;
* `generic`: the responder of last resort.
"""

from .fill import fill_schema, reply_json
from .generic import generic
from .json_schema import SchemaError, validate_schema
from .judged import Ctx, scaled
from .noise import noisy, noisy_level, perturbed
from .prompt_text import (
    INPUT_KEYS,
    SECTION_LABELS,
    Labels,
    ctx_from_inputs,
    ctx_from_sections,
    example_json,
    find_range,
    json_after,
    labelled_sections,
    parse_list,
    schema_from_example,
    schema_in_prompt,
)
from .registry import Responder, register, responders, respond, unregister
from .request import JudgeReply, JudgeRequest
from .toy_judge import (
    best_sentence,
    content_words,
    is_noncommittal,
    is_relevant,
    is_supported,
    make_question,
    numbers,
    relevance,
    short,
    split_sentences,
    support,
    usefulness,
)

__all__ = [
    "JudgeRequest", "JudgeReply", "Responder", "register", "unregister", "responders", "respond", "generic",
    "Ctx", "Labels", "SECTION_LABELS", "INPUT_KEYS", "fill_schema", "validate_schema", "SchemaError",
    "schema_from_example", "find_range", "scaled", "reply_json", "json_after", "schema_in_prompt",
    "example_json", "labelled_sections", "parse_list", "ctx_from_sections", "ctx_from_inputs",
    "content_words", "numbers", "support", "is_supported", "relevance", "is_relevant", "perturbed",
    "noisy", "noisy_level", "usefulness", "is_noncommittal", "split_sentences", "best_sentence",
    "make_question", "short",
]
