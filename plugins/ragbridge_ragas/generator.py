"""RAGAS' test-set generator (``ragas.testset.TestsetGenerator``) behind ``ragbridge synthesize
--generator ragas``.

The corpus's passages are RAGAS' chunks (``generate_with_chunks``): RAGAS builds its knowledge graph
over them with its transforms for pre-chunked documents (summaries, their embeddings, themes, named
entities, the similarity and entity-overlap relationships), writes personas, then questions with its
query synthesizers, chosen by the mix: ``single`` is ``SingleHopSpecificQuerySynthesizer``,
``multi`` is ``MultiHopSpecificQuerySynthesizer`` (two chunks that share entities). A kind whose
synthesizer finds nothing to work on in the graph (no two chunks share an entity) makes no question
and says so in the generation's notes; RAGAS makes neither paraphrased nor unanswerable questions.

Everything goes through ragbridge's judge gateway: the LLM is ``ragas.llms.llm_factory`` on an
``AsyncOpenAI`` client on the gateway's in-process transport (as the backend's metrics), and so are
the embeddings, ``ragas.embeddings.OpenAIEmbeddings`` on the same client with the judge's
``embedding_model`` (``--embedding-model``; RAGAS' default name otherwise): the judge endpoint's
``/embeddings``, cached and counted like every call. There is no network and nothing is downloaded:
against ragbridge's stub judge the embeddings are its deterministic hashed bag of words. RAGAS'
transforms count tokens with tiktoken, whose encoding file is downloaded on first use; ragbridge
gives them a ``WordTokenizer`` (`word_tokenizer`) instead, a tokenizer of this machine (words and the
spaces between them), used only to cut a chunk longer than an extractor's token limit, which a
passage of a few hundred words never is.

What comes back: each ``TestsetSample``'s ``user_input`` (the question), ``reference`` (the answer)
and ``reference_contexts``: the chunks the question was written from (RAGAS prefixes each context of
a multi-hop question with ``<N-hop>``, which is removed), placed by ragbridge in the documents as
span labels; RAGAS' persona, query style and length and synthesizer name go into
``metadata.synthetic.library``. RAGAS draws its scenarios with Python's ``random``, seeded with
``--seed`` before it starts; but it draws in concurrent steps and names its graph's nodes with
random UUIDs, so the seed does not fix its choices: run again, it replays most of its calls from the
judge cache (its graph's) and asks part of the rest anew. Its progress bars (on stderr) are RAGAS'
own. Its multi-hop synthesizer links two chunks by nearly equal entities, then keeps the chunks
whose entities hold the theme exactly: a multi-hop question may come with one context, which the
weakness measures count as one answer passage.
"""

from __future__ import annotations

import re
from typing import Any

from ragbridge.plugin import GeneratedItem, Generator, GeneratorRequest

from .env import ENVIRONMENT, keep_ragas_id_out_of_home

__all__ = ["RagasGenerator", "word_tokenizer", "SYNTHESIZERS"]

#: the RAGAS query synthesizer behind each kind
SYNTHESIZERS = {"single": "SingleHopSpecificQuerySynthesizer", "multi": "MultiHopSpecificQuerySynthesizer"}
_HOP = re.compile(r"^<\d+-hop>\s*")


def word_tokenizer() -> Any:
    """A RAGAS tokenizer of this machine: `WordTokenizer` (made here: RAGAS is imported when used)."""
    from ragas.tokenizers import BaseTokenizer

    class WordTokenizer(BaseTokenizer):
        """Words and the white space between them, each a token; decoding joins them back exactly."""

        def __init__(self) -> None:
            self.vocab: list[str] = []
            self.ids: dict[str, int] = {}

        def encode(self, text: str) -> list[int]:
            out = []
            for tok in re.findall(r"\s+|\S+", text):
                if tok not in self.ids:
                    self.ids[tok] = len(self.vocab)
                    self.vocab.append(tok)
                out.append(self.ids[tok])
            return out

        def decode(self, tokens: list[int]) -> str:
            return "".join(self.vocab[t] for t in tokens)

    return WordTokenizer()


def _set_tokenizer(transforms: Any, tokenizer: Any) -> None:
    for t in transforms if isinstance(transforms, list) else [transforms]:
        inner = getattr(t, "transformations", None)
        if inner is not None:
            _set_tokenizer(list(inner), tokenizer)
        elif hasattr(t, "tokenizer"):
            t.tokenizer = tokenizer


class RagasGenerator(Generator):
    name = "ragas"
    module = "ragas"
    install_hint = "pip install 'ragbridge[ragas]'"
    kinds = ("single", "multi")

    def environment(self) -> dict[str, str]:
        return dict(ENVIRONMENT)

    def generate(self, request: GeneratorRequest) -> list[GeneratedItem]:
        from langchain_core.documents import Document
        from ragas.embeddings import OpenAIEmbeddings
        from ragas.llms import llm_factory
        from ragas.testset import TestsetGenerator
        from ragas.testset.graph import KnowledgeGraph, Node, NodeType
        from ragas.testset.synthesizers import multi_hop, single_hop
        from ragas.testset.transforms import apply_transforms, default_transforms_for_prechunked

        from ragbridge.plugin import async_openai_client

        from .backend import DEFAULT_MAX_TOKENS

        keep_ragas_id_out_of_home()
        cfg = request.judge.config
        client = async_openai_client(request.judge)
        llm = llm_factory(cfg.model, client=client, max_tokens=cfg.max_tokens or DEFAULT_MAX_TOKENS)
        embeddings = OpenAIEmbeddings(client=client,
                                      model=cfg.embedding_model or OpenAIEmbeddings.DEFAULT_MODEL)
        # RAGAS' node filter scores a chunk against its parent document's summary, and skips (with a
        # warning each) every chunk that has none, as no pre-chunked chunk has: left out, it changes
        # nothing but the warnings
        transforms = [t for t in default_transforms_for_prechunked(llm=llm, embedding_model=embeddings)
                      if type(t).__name__ != "CustomNodeFilter"]
        _set_tokenizer(transforms, word_tokenizer())
        chunks = [Document(page_content=p.text, metadata={"doc": p.doc}) for p in request.passages]
        kg = KnowledgeGraph(nodes=[Node(type=NodeType.CHUNK, properties={"page_content": c.page_content,
                                                                          "document_metadata": c.metadata})
                                   for c in chunks])
        with request.judge.tag_scope("synthetic", "ragas:graph"):
            apply_transforms(kg, transforms)
        made = {"single": single_hop.specific.SingleHopSpecificQuerySynthesizer(llm=llm),
                "multi": multi_hop.specific.MultiHopSpecificQuerySynthesizer(llm=llm)}
        wanted = {k: v for k, v in request.counts.items() if v > 0}
        distribution = []
        for kind, count in wanted.items():
            if made[kind].get_node_clusters(kg):
                distribution.append((made[kind], count))
            else:
                request.notes.append(f"RAGAS made no {kind} question: its {SYNTHESIZERS[kind]} found nothing "
                                     "to work on in the knowledge graph")
        if not distribution:
            return []
        total = sum(c for _, c in distribution)
        generator = TestsetGenerator(llm=llm, embedding_model=embeddings, knowledge_graph=kg)
        with request.judge.tag_scope("synthetic", "ragas:questions"):
            testset = generator.generate(testset_size=total,
                                         query_distribution=[(s, c / total) for s, c in distribution])
        out = []
        for sample in testset.samples:
            s = sample.eval_sample
            kind = "multi" if "multi" in sample.synthesizer_name else "single"
            meta = {"synthesizer": sample.synthesizer_name,
                    **{k: v for k, v in (("persona", s.persona_name), ("query_style", s.query_style),
                                         ("query_length", s.query_length)) if v is not None}}
            out.append(GeneratedItem(question=s.user_input or "", answer=s.reference,
                                     contexts=[_HOP.sub("", c) for c in (s.reference_contexts or [])],
                                     kind=kind, metadata=meta))
        return out
