"""Files: outputs written whole or not at all, and the one reader of JSON lines.

Every output ragbridge writes (other than the append-only scores and logs) goes through
`atomic_path`, so a reader finds the earlier output or the new one, whole, never a part of one.

Every JSONL file ragbridge reads (a golden set, a production log, a run's ``scores.jsonl`` and
``target.jsonl``) is read by `jsonl_lines`: one ``(line number, parsed value)`` per non-blank line,
and for a bad line a `DatasetError` naming the file, the line, the column and what to do (or, for the
files a killed run may have cut short, the error handed to ``on_bad`` and the line skipped).

`DatasetError` is the bad-input error of every reader; it lives here, below the other modules of
``ragbridge.formats``, because each of them raises it (``ragbridge.formats`` exports it).
"""

from __future__ import annotations

import filecmp
import gc
import json
import os
import re
import secrets
import shutil
import stat
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from ..errors import UserError
from ..schema import MAX_METADATA_DEPTH

__all__ = ["DatasetError", "atomic_path", "distinct_output", "write_atomic", "temporary", "output_name",
           "sweep_temporaries", "json_problem", "no_follow", "refuse_link", "OutputRefused", "scratch_folder",
           "sweep_scratch", "pid_alive", "parse_json", "check_parsed", "text_lines", "jsonl_lines",
           "parse_line", "read_hf_rows", "read_parquet_table", "parquet_file", "optional_module",
           "no_cycle_collection"]


class DatasetError(UserError, ValueError):
    """Bad input in a dataset file: says where (file, line, field), what, and what to do."""

    def __init__(
        self,
        message: str,
        path: Optional[str | Path] = None,
        line: Optional[int] = None,
        field: Optional[str] = None,
        hint: Optional[str] = None,
        unit: str = "line",
    ):
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        self.message = message
        self.hint = hint
        self.unit = unit
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path or ("<data>" if self.line is not None else "")  # an option's error: no place
        if self.line is not None:
            where += f":{self.line}" if self.unit == "line" else f" ({self.unit} {self.line})"
        text = f"{where}: " if where else ""
        if self.field:
            text += f"field '{self.field}': "
        text += self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


def optional_module(name: str, extra: str, what: str, path: Optional[str | Path] = None) -> Any:
    """The module ``name`` (``pyarrow.parquet``, ``datasets``), which ``pip install ragbridge`` alone does
    not install; a `DatasetError` saying which extra does, where it is missing."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        top = name.split(".")[0]
        raise DatasetError(f"{what} needs {top}, which a plain `pip install ragbridge` leaves out",
                           path=path, hint=f"pip install 'ragbridge[{extra}]'") from None


# --------------------------------------------------------------------------------------------
# Writing whole or not at all


@contextmanager
def atomic_path(path: str | Path, keep_same: bool = False) -> Iterator[Path]:
    """A temporary path beside ``path`` to write a file or a folder at; on success it takes ``path``'s
    place (``keep_same``: unless ``path`` is a file of the same bytes, which is then left as it is,
    its inode and modification time with it).

    A writer killed half way leaves only a hidden temporary beside the output (`temporary`), which
    the next write into that folder removes (`sweep_temporaries`). The temporary keeps the name's
    suffix, for writers that choose by it. A file is synced and renamed over ``path``; a folder is
    renamed into place after the old one is moved aside (a kill between the two renames leaves no
    output, not a partial one). On an exception the temporary is removed and nothing is replaced.
    An output that is a symbolic link or not a file (``/dev/stdout``) is refused (`refuse_link`).
    """
    path = Path(path)
    refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_temporaries(path.parent)
    tmp = temporary(path)
    try:
        yield tmp
        if tmp.is_dir():
            old = temporary(path, "old")
            if path.exists():
                os.replace(path, old)
            os.replace(tmp, path)
            _remove(old)
        elif keep_same and path.is_file() and filecmp.cmp(tmp, path, shallow=False):
            _remove(tmp)
        else:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


class OutputRefused(DatasetError):
    """An output path that is a symbolic link or not a file (a device, a pipe): writing it would
    replace the link (or the device) with a file, or write through it to somewhere else."""


def refuse_link(path: str | Path) -> None:
    """Raise `OutputRefused` when ``path`` is a symbolic link, or is there and is neither a file nor
    a folder: every file the project writes is written where it is named, whole, never through a
    link."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        what = f"is a symbolic link (to {os.readlink(path)})"
    elif stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return
    else:
        what = "is not a file (a device, a pipe or a socket)"
    raise OutputRefused(f"{what}: an output is written whole where it is named, never over or through a "
                        "link or a device", path=path,
                        hint="give another path; to print to standard output, `--out -` where the "
                             "command takes it (report)")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


#: a temporary of `atomic_path`: ``.tmp-`` (or ``.old-``, an earlier folder moved aside), the pid of
#: the process writing it and its machine's tag (`_host_tag`), a random part, the output's name
_TEMPORARY = re.compile(r"^\.(?:tmp|old)-(\d+)@([0-9a-f]{4})-[0-9a-f]{8}-(.+)$", re.S)


def temporary(path: Path, kind: str = "tmp") -> Path:
    """A hidden path beside ``path`` for writing it, named for this process (see `_TEMPORARY`)."""
    return path.with_name(f".{kind}-{os.getpid()}@{_host_tag()}-{secrets.token_hex(4)}-{path.name}")


def output_name(name: str) -> str:
    """The name of the output that a temporary named ``name`` stands for (``name`` if it is none)."""
    m = _TEMPORARY.match(name)
    return m.group(3) if m else name


def sweep_temporaries(folder: Path) -> None:
    """Remove the temporaries (`temporary`) in ``folder`` that writers killed half way left there:
    only this user's, made on this machine, by a process that is gone. A live writer's, another
    user's and any other file are left alone."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    here = _host_tag()
    for name in names:
        m = _TEMPORARY.match(name)
        if m is None or m.group(2) != here or pid_alive(int(m.group(1))):
            continue
        path = Path(folder) / name
        try:
            if path.lstat().st_uid != os.geteuid():
                continue
        except OSError:
            continue
        _remove(path)


def _host_tag() -> str:
    """Four hex digits naming this machine (a folder may be shared with others, whose pids are not ours)."""
    import hashlib
    import socket

    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:4]


def _same_path(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)  # a hard link or a symbolic link to it too
    except OSError:
        pass
    return a.resolve() == b.resolve()


def distinct_output(out: Optional[str | Path], inputs: Any) -> None:
    """Refuse an output that would replace one of a command's ``inputs`` (paths; None is skipped):
    the same file after resolving links (and hard links), or a folder written whole that holds one.
    Raises `DatasetError` naming both, before anything is read or written: every command that reads
    files and writes one calls this first."""
    if out is None:
        return
    out = Path(out)
    for given in inputs:
        if given is None:
            continue
        source = Path(given)
        if _same_path(out, source) or any(_same_path(out, p) for p in source.resolve().parents):
            raise DatasetError(f"the output is the input {str(source)!r}: writing it would replace what "
                               "is read", path=out, hint="write to another file; nothing was written")


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write text (UTF-8) or bytes to ``path`` whole or not at all (see `atomic_path`)."""
    with atomic_path(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return Path(path)


# --------------------------------------------------------------------------------------------
# Reading


def parse_json(text: str) -> Any:
    """``json.loads``, with what it takes silently reported as bad input (`check_parsed`: a key given
    twice in one object, a lone surrogate escape), and nesting too deep for the parser too, not a
    crash (a `DatasetError` without a location: the caller adds it)."""
    try:
        value = json.loads(text)
    except RecursionError:
        column, key = _deep_spot(text)
        raise DatasetError(
            f"nests more than {MAX_METADATA_DEPTH} levels of objects and lists (by column {column}), "
            "too deep to read",
            field=key,
            hint="flatten it, or store the deep part as a JSON string",
        ) from None
    check_parsed(text, value)
    return value


def check_parsed(text: str, value: Any, surrogates: bool = True, keys: Optional[int] = None) -> None:
    """Raise a `DatasetError` (without a location) for what JSON parsers take silently in ``text``,
    parsed as ``value``: a key given twice in one object (they keep the last value) and a lone
    surrogate escape such as ``\\udce9`` (half of a UTF-16 pair: no character, it cannot be written
    as UTF-8; ``surrogates=False`` for a value ``pydantic_core.from_json`` parsed, which refuses
    one). Each is looked for only where a cheap count of ``text`` says it may be there: every key
    has a colon of its own, so where there are no more colons than keys in ``value``, none was
    given twice (a search for a character is many times quicker than for two). ``keys``: the keys in
    ``value``, where the caller knows them."""
    keys = _key_count(value) if keys is None else keys
    if text.count(":") > keys and _key_bound(text) > keys:
        json.loads(text, object_pairs_hook=_unique_keys)
    if surrogates and ("\\ud" in text or "\\uD" in text):
        _no_lone_surrogate(value)


def _key_bound(text: str) -> int:
    """At least the number of keys in JSON ``text``: every key's closing quote is followed by its colon,
    at once or after white space."""
    bound = text.count('":')
    # white space between a key and its colon: then a colon follows white space
    if " :" in text or "\t:" in text or "\n:" in text or "\r:" in text:
        bound += len(_SPACED_COLON.findall(text))
    return bound


_SPACED_COLON = re.compile(r'"[ \t\n\r]+:')


def _key_count(value: Any) -> int:
    """The keys in ``value``: a list of objects whose values hold no object or list (a golden set's
    chunks) is counted at once, in C loops."""
    n, stack = 0, [value]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            n += len(item)
            if not _NESTED.isdisjoint(map(type, item.values())):
                stack += [v for v in item.values() if type(v) is dict or type(v) is list]
        elif type(item) is list:
            if item and set(map(type, item)) == {dict} and _FLAT.issuperset(
                    map(type, chain.from_iterable(map(dict.values, item)))):
                n += sum(map(len, item))
            elif not _NESTED.isdisjoint(map(type, item)):
                stack += [v for v in item if type(v) is dict or type(v) is list]
    return n


_FLAT = frozenset({str, int, float, bool, type(None)})
_NESTED = frozenset({dict, list})


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DatasetError(f"key {key!r} is given twice in one object; a JSON reader would keep the "
                               "last value silently", hint="give each key once")
        out[key] = value
    return out


def _no_lone_surrogate(value: Any) -> None:
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, at = stack.pop()
        if type(item) is dict:
            for key, v in item.items():
                stack.append((key, at))
                stack.append((v, f"{at}.{key}" if at else str(key)))
        elif type(item) is list:
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(item))
        elif type(item) is str and not item.isprintable():
            char = next((c for c in item if "\ud800" <= c <= "\udfff"), None)
            if char is not None:
                raise DatasetError(
                    f"holds the escape \\u{ord(char):04x}, half of a UTF-16 surrogate pair without its other "
                    "half: not a character, and it cannot be written as UTF-8", field=at or None,
                    hint="fix the program that wrote it, or remove the escape")


def _deep_spot(text: str) -> tuple[int, Optional[str]]:
    """Where JSON ``text`` passes `MAX_METADATA_DEPTH` levels: the column and the top-level key."""
    depth, key, last, in_string, escaped, start = 0, None, None, False, False, 0
    for column, char in enumerate(text, start=1):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                if depth == 1:
                    last = text[start:column - 1]
        elif char == '"':
            in_string, start = True, column
        elif char in "[{":
            depth += 1
            if depth == 2:
                key = last
            if depth > MAX_METADATA_DEPTH:
                return column, key
        elif char in "]}":
            depth -= 1
    return len(text), key


OnBad = Optional[Callable[[DatasetError], None]]


def text_lines(path: Path, allow_empty: bool = False, on_bad: OnBad = None) -> Iterator[tuple[int, str]]:
    """Each line of a UTF-8 text file with its number from 1, without its ``\\n`` (a leading BOM is
    dropped). Read as a stream: memory holds one line.

    Invalid UTF-8 raises a `DatasetError` naming the line, the byte and its column (with ``on_bad``:
    the error is passed to it and the line skipped). A file with nothing but white space raises one
    ("file is empty"), unless ``allow_empty``.
    """
    blank = True
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                try:
                    text = _decoded(path, n, raw)
                except DatasetError as error:
                    if on_bad is None:
                        raise
                    on_bad(error)
                    continue
            blank = blank and not text.strip()
            yield n, text
    if blank and not allow_empty:
        raise DatasetError("file is empty", path=path, hint="a golden set needs at least one case")


def _decoded(path: Path, n: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"invalid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                           path=path, line=n, hint="save the file as UTF-8") from None


def jsonl_lines(
    path: Path,
    allow_empty: bool = False,
    on_bad: OnBad = None,
    hint: str = "each line must be one JSON object",
    parse: Callable[[str], Any] = parse_json,
) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed value)`` for each non-blank line of a JSONL file (see `text_lines`).

    A line that is not JSON raises a `DatasetError` with the line, the column and ``hint``; with
    ``on_bad`` the error is passed to it and the line skipped (a line cut short by a killed writer).
    ``parse`` turns a line's text into its value (e.g. a pydantic model's ``model_validate_json``);
    a ``ValueError`` it raises is the line's error.
    """
    for n, text in text_lines(path, allow_empty, on_bad):
        if not text.strip():
            continue
        try:
            value = parse(text)
        except Exception:  # parsed again by `parse_line`, which says what is wrong
            try:
                value = parse_line(path, n, text, hint, parse)
            except DatasetError as error:
                if on_bad is None:
                    raise
                on_bad(error)
                continue
        yield n, value


def json_problem(exc: json.JSONDecodeError) -> str:
    """What is wrong with a line of JSON, in words: ``not valid JSON: Unterminated string starting at
    column 12`` (the parser's own message ends with "at" for some errors)."""
    return f"not valid JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}"


def parse_line(path: Path, n: int, text: str, hint: str, parse: Callable[[str], Any]) -> Any:
    """Line ``n`` of ``path`` (its ``text``) parsed by ``parse``, or the `DatasetError` `jsonl_lines`
    raises for it (the file, the line, the column, ``hint``)."""
    try:
        return parse(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(json_problem(exc), path=path, line=n, hint=hint) from None
    except DatasetError as exc:
        exc.path, exc.line = str(path), n
        raise
    except ValueError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DatasetError(f"not valid: {reason}", path=path, line=n, hint=hint) from None


def read_hf_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a Hugging Face ``datasets`` folder (one split), as dicts."""
    datasets = optional_module("datasets", "datasets", "reading a datasets folder", path)

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise DatasetError(f"cannot be loaded with datasets.load_from_disk: {exc}", path=path) from None
    if isinstance(ds, datasets.DatasetDict):
        if len(ds) != 1:
            raise DatasetError(f"holds splits {list(ds)}; point at one split's folder", path=path)
        ds = next(iter(ds.values()))
    if len(ds) == 0:
        raise DatasetError("dataset is empty", path=path, hint="a golden set needs at least one case")
    return ds.to_list()


#: a Parquet table whose structs would give more (row, field) cells than this is refused before it is read
MAX_STRUCT_CELLS = 5_000_000


def _struct_fields(kind: Any) -> int:
    """How many fields a row holds for a column of Arrow type ``kind`` (a struct's, nested ones too)."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return sum(max(1, _struct_fields(kind.field(i).type)) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _struct_fields(kind.value_type)
    return 0


def read_parquet_table(path: Path) -> Any:
    """A Parquet file as an Arrow table, its schema checked first (`parquet_file`)."""
    try:
        return parquet_file(path).read()
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"cannot be read as Parquet: {exc}", path=path) from None


def parquet_file(path: Path) -> Any:
    """A Parquet file opened (a ``pyarrow.parquet.ParquetFile``, nothing read but its footer), after
    a look at its schema: a struct column whose every row holds every one of very many fields
    (pandas' ``to_parquet`` writes a column of dicts so, a field per key that any row has: labels
    keyed by chunk id give rows x distinct ids cells, gigabytes at a few thousand cases) is refused
    with what to write instead, before it is read."""
    pq = optional_module("pyarrow.parquet", "parquet", "reading Parquet", path)

    try:
        source = pq.ParquetFile(path)
        meta = source.metadata
        schema = meta.schema.to_arrow_schema()
    except Exception as exc:
        raise DatasetError(f"cannot be read as Parquet: {exc}", path=path) from None
    for field in schema:
        width = _struct_fields(field.type)
        if width > 1 and meta.num_rows * width > MAX_STRUCT_CELLS:
            raise DatasetError(
                f"column {field.name!r} is a struct of {width:,} fields that every one of the "
                f"{meta.num_rows:,} rows holds ({meta.num_rows * width:,} cells, most of them null): "
                "pandas' to_parquet writes a column of dicts so, one field per key that any row has, "
                "and reading it takes memory as rows times keys", path=path, field=field.name,
                hint=f"write the column as JSON text (df[{field.name!r}] = "
                     f"df[{field.name!r}].map(json.dumps)) before to_parquet, or save the set as JSON "
                     "lines (df.to_json(path, orient='records', lines=True))")
    return source


def no_follow(path: str, flags: int) -> int:
    """An ``opener`` for `open` that does not follow a symbolic link at ``path`` (``OSError`` ELOOP):
    a file is written where it is named, never where a link made by someone else points."""
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)


def scratch_folder(prefix: str) -> str:
    """A private temporary folder (0700) named for this process (``<prefix><pid>-<random>``), removed
    when the process exits; the folders of ``prefix`` that this user's processes now gone left (a
    SIGTERM or SIGKILL runs no exit handler) are removed first (`sweep_scratch`)."""
    import atexit
    import tempfile

    parent = tempfile.gettempdir()
    sweep_scratch(prefix, parent)
    path = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent)
    atexit.register(shutil.rmtree, path, True)
    return path


def sweep_scratch(prefix: str, parent: str) -> None:
    """Remove the folders ``<prefix><pid>-...`` in ``parent`` of this user whose process is gone. Live
    processes' folders, another user's and anything else are left alone."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):].split("-", 1)[0]
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if (pid.isdigit() and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
                and not pid_alive(int(pid))):
            shutil.rmtree(path, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (True also when it is another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """The cyclic garbage collector held off while a large file is read (a golden set, a run folder's
    scores read back): reading makes lists, dicts and strings by the million and no reference cycle,
    so the collector's passes over a batch in memory find nothing (a tenth to a fifth of the reading's
    time); on as before after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
