"""The pages in docs/ run as written, so they cannot drift from the code.

Every ```bash block of every docs/*.md page runs, in order, in a fresh folder that sees the
repository's examples/ (as the pages say: "from the root of the repository"), with ``ragbridge`` and
``python`` on PATH meaning this Python, and the judge URL the pages use replaced by a stub judge on
127.0.0.1. A block passes when it exits 0 and every examples/ or runs/ path it names exists
afterwards (a .json file it wrote must be JSON).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

DOCS = ROOT / "docs"
DOC_JUDGE_URL = "http://127.0.0.1:8808/v1"  # what `ragbridge judge serve --stub` listens on by default
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
NAMED_PATH = re.compile(r"(?<![\w/.-])(?:examples|runs)/[\w./@-]*[\w]")


def bash_blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


PAGES = [p.name for p in sorted(DOCS.glob("*.md")) if bash_blocks(p)]


def test_the_walkthroughs_are_linked_from_the_readme_and_have_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in ("migrate-ragas-to-deepeval.md", "cross-check-faithfulness.md"):
        assert f"docs/{page}" in readme, page
        assert page in PAGES, f"{page} has no ```bash block to run"


def test_every_page_with_commands_says_which_environment_runs_them():
    """The pages write `ragbridge` and `python`: the README installs them into .venv, so a page says
    to activate it (or to write the .venv/bin path) before its first command."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = readme.index("## Set up and run the example")
    assert "source .venv/bin/activate" in readme[setup:readme.index("## Walkthroughs")]
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        first = re.search(r"^```(bash|python)\n", text, re.M)
        if first:
            assert "source .venv/bin/activate" in text[:first.start()], page.name


#: files a page's commands may write: under runs/ (git-ignored), or to nowhere
WRITES = re.compile(r"(?:^|[\s;|&])(?:cat\s+)?>{1,2}(?!=)\s*([^\s;|&]+)", re.M)


@pytest.mark.parametrize("page", PAGES)
def test_a_page_writes_nothing_outside_runs(page):
    """A file a walkthrough writes into the repository (a ragbridge.toml in the root, which every later
    command there reads) changes every later walkthrough: each redirect goes under runs/."""
    for block in bash_blocks(DOCS / page):
        for target in WRITES.findall(block):
            assert target.startswith(("runs/", "/dev/null", '"$GITHUB_STEP_SUMMARY"', "&")), (page, target)


#: every page a user reads commands from
READ_PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md")),
              *sorted((ROOT / "examples").glob("*/README.md"))]
INLINE_COMMAND = re.compile(r"`(ragbridge [^`]+)`")


def test_every_command_named_in_a_sentence_is_one_the_command_line_takes():
    """A command written in a sentence or a table (`ragbridge gate runs/x --config gates.toml`) is not
    run by the walkthroughs: each is parsed by the command line as the shell would pass it (a
    placeholder such as ``...`` or ``RUN`` stands for a value; a command named without its arguments,
    or an option named at the end without its value, is a mention)."""
    import shlex

    import typer
    from typer._click.exceptions import BadOptionUsage, ClickException, MissingParameter

    from ragbridge.commands import cli, register_commands

    register_commands(cli)
    group = typer.main.get_command(cli)
    wrong = []
    for page in READ_PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
        for line in INLINE_COMMAND.findall(text):
            args = [a for a in shlex.split(line)[1:] if not a.startswith("[") and not a.endswith("]")]
            if "--help" in args:
                continue
            ctx = group.make_context("ragbridge", [args[0]], resilient_parsing=True)
            try:
                name, command, rest = group.resolve_command(ctx, args)
                command.make_context(name, rest, parent=ctx)
            except MissingParameter:
                pass
            except BadOptionUsage as exc:
                if not ("requires an argument" in str(exc) and args[-1].startswith("-")):
                    wrong.append((page.name, line, str(exc)))
            except ClickException as exc:
                wrong.append((page.name, line, str(exc)))
    assert not wrong


STUB_MODEL = re.compile(r"""(?:--judge-model|--embedding-model|model\s*=|embedding_model\s*=)\s*\\?["']?"""
                        r"(stub[\w.-]*)")
#: a second judge model, on purpose: a page comparing two judges names a second model, which the stub
#: answers as it answers any name (it lists stub-judge and stub-embedder)
SECOND_JUDGE = "stub-judge-2"


def test_the_stub_models_the_pages_name_are_the_ones_it_serves():
    """A page's stub judge is the one ``ragbridge judge serve --stub`` starts, on the port it says
    (8808), serving the models its GET /models lists: a model name the stub does not list (``stub``,
    ``stub-embed``) reads as a model of its own, which a real server would refuse."""
    import json as json_
    import urllib.request

    from ragbridge.commands.judge import judge_serve
    from ragbridge.testing import StubJudge

    port = inspect.signature(judge_serve).parameters["port"].default.default
    assert f"127.0.0.1:{port}/v1" == DOC_JUDGE_URL.removeprefix("http://")
    with StubJudge() as stub, urllib.request.urlopen(f"{stub.base_url}/models") as reply:
        served = {m["id"] for m in json_.load(reply)["data"]}
    assert served == {"stub-judge", "stub-embedder"}
    pages = [*READ_PAGES, *sorted((ROOT / "examples").glob("*.ipynb"))]
    named = {(page.name, m) for page in pages for m in STUB_MODEL.findall(page.read_text(encoding="utf-8"))}
    assert {m for _, m in named} - served - {SECOND_JUDGE} == set(), sorted(named)
    for page, model in named:
        if model == SECOND_JUDGE:
            assert "answers any model name" in (ROOT / "docs" / page).read_text(encoding="utf-8"), page
    assert {"stub-judge", "stub-embedder"} <= {m for _, m in named}
    for page in pages:  # the stub's address, wherever a page writes one
        for address in re.findall(r"127\.0\.0\.1:(\d+)/v1", page.read_text(encoding="utf-8")):
            assert address == str(port), page.name


def test_the_gates_files_keys_are_the_ones_gate_reads():
    """examples/ci/README.md lists a gates file's rule keys and [defaults] keys: each one gate reads."""
    from ragbridge.analysis.gate import config

    page = (ROOT / "examples" / "ci" / "README.md").read_text(encoding="utf-8")
    listed = page[page.index("Rule keys:"):]
    listed = set(re.findall(r"`(\w+)`", listed[:listed.index(".", listed.index("`last`"))]))
    assert listed == config._RULE_KEYS
    defaults = re.search(r"^\[defaults\] +# optional; any rule key but check and name, plus (.*)$",
                         page, re.M)
    assert set(re.split(r",\s*", defaults.group(1))) == config._DEFAULT_KEYS - config._RULE_KEYS


def _shims(bin_dir: Path) -> None:
    bin_dir.mkdir()
    cli = f'exec "{sys.executable}" -c "from ragbridge.commands import run_cli; run_cli()" "$@"'
    for name, body in (("ragbridge", cli), ("python", f'exec "{sys.executable}" "$@"')):
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)


@pytest.mark.slow  # each page is a whole walkthrough: from half a minute to two minutes
@pytest.mark.parametrize("page", PAGES)
def test_doc_commands_run(page, tmp_path, stub_judge):
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    _shims(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "80"}
    env.pop("OTEL_SDK_DISABLED", None)  # an application a page runs records its own spans
    # the environments of --backend NAME==VERSION: built for the test (from uv's cache), not in the home
    env["RAGBRIDGE_CACHE_DIR"] = str(tmp_path / "ragbridge-cache")
    if env.get("PYTHONPATH"):  # the commands run elsewhere: keep a relative PYTHONPATH pointing here
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve())
                                            for p in env["PYTHONPATH"].split(os.pathsep) if p)
    judged = False
    for i, block in enumerate(bash_blocks(DOCS / page), start=1):
        if "--judge-base-url" in block:
            assert DOC_JUDGE_URL in block, f"{page} block {i}: use the stub judge's URL {DOC_JUDGE_URL}"
            judged = True
        script = block.replace(DOC_JUDGE_URL, stub_judge.base_url)
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env,
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, (f"{page} block {i} exited {r.returncode}:\n{block}\n"
                                   f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        assert "Traceback" not in r.stderr, f"{page} block {i}:\n{r.stderr[-3000:]}"
        for path in NAMED_PATH.findall(block):
            assert (work / path).exists(), f"{page} block {i} names {path}, which does not exist after it ran"
            if path.startswith("runs/") and path.endswith(".json"):
                json.loads((work / path).read_text(encoding="utf-8"))  # e.g. `--json > FILE` wrote JSON
    if judged:
        assert stub_judge.request_count > 0, "the judged commands never reached the judge"
