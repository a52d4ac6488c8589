"""Options, each declared once: a field of a pydantic model, with its type, default, limits and help.

Three kinds of model hold every option a run takes:

* `ragbridge.run.request.RunRequest`: the run's parameters, which ``ragbridge.evaluate`` takes as
  keywords (a test holds its signature and docstring to the model);
* `ragbridge.backend.RunOptions`: what every backend may read (``k``, ``generator_model``), and
  each backend's own options by the backend's name (``backend_options``);
* each backend's options model (``Backend.Options``, a subclass of `BackendOptions`): what that
  backend reads, validated before a run starts.

A field is declared with `option`: its default, its help, and, for the options the command line
spells as a flag of its own, that flag (``--repeats``, ``--gain``). ``ragbridge run`` and ``ragbridge
rescore`` build those flags from the fields (`ragbridge.commands.model_options`). Every backend
option is also reached by the one generic form, from every source alike:

* the command line: ``--option BACKEND.KEY=VALUE`` (repeatable; the value is text, converted as the
  option's type says; a list option takes the option once per item, or a JSON list; a mapping takes
  a JSON object);
* ``ragbridge.toml``: a ``[backends.NAME]`` table (``[tool.ragbridge.backends.NAME]`` in
  ``pyproject.toml``), read by `config_tables`;
* Python: ``evaluate(..., options={"native": {"gain": "exponential"}})``, or the backend's model itself.

`backend_options` checks what each source gives against the backend's model and merges the sources
(the command line over ``ragbridge.toml`` over ``pyproject.toml``). What is wrong is an `OptionError`
that names the source, the backend and the option: an unknown backend (with the registered ones),
an unknown option (with the backend's options), a value of the wrong type (with the type expected).
`describe` lists a model's options (name, type, default, help) for ``ragbridge backends``.
"""

from __future__ import annotations

import collections.abc
import json
import types
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

import annotated_types
from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict, ValidationError
from pydantic.fields import FieldInfo

from .errors import UserError
from .flags import FlagSpec, unwrap

__all__ = ["option", "flag_of", "flag_spec", "BackendOptions", "Whole", "Number", "Bool",
           "OptionError", "describe", "expected", "type_text", "parse_assignment", "backend_options",
           "config_tables", "check", "field_error"]

#: a whole number: an ``int`` (not a bool; from the command line or TOML, its digits)
Whole = typing.Annotated[int, Strict()]
#: a finite number: an int or a float (not a bool)
Number = typing.Annotated[float, Strict(), AllowInfNan(False)]
#: true or false (``true``/``false``, ``yes``/``no``, ``1``/``0`` from the command line)
Bool = typing.Annotated[bool, Strict()]


def option(default: Any = ..., help: str = "", *, flag: Optional[str] = None, cli_type: Any = None,
           pass_mark: bool = False, **field: Any) -> Any:
    """A field of an options model: ``default`` (or ``default_factory=``); ``help``, one or two
    sentences as ``ragbridge backends`` and ``--help`` show them; ``flag``, the command line's own
    flag for the few options that have one, its spellings separated by spaces (``"--repeats"``,
    ``"--backend -b"``, ``"--score-cache/--no-score-cache"``; every backend option is reached by
    ``--option`` too); ``cli_type``, the type the command line reads where the field's is wider
    (``str`` for a target); ``pass_mark``: the option is the pass mark of every metric of its backend
    (a number in 0..1, or a mapping of metric to number; `pass_mark_of`); and pydantic's limits
    (``ge=1``, ``le=...``)."""
    extra = {k: v for k, v in (("flag", flag), ("cli_type", cli_type), ("pass_mark", pass_mark or None))
             if v is not None}
    if "default_factory" not in field:
        field["default"] = default
    return Field(description=help, json_schema_extra=extra or None, **field)


def _extra(info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def flag_of(info: FieldInfo) -> Optional[str]:
    """The field's own command-line flag (its first spelling: ``--backend`` of ``--backend -b``,
    ``--score-cache`` of ``--score-cache/--no-score-cache``), or None."""
    flag = _extra(info).get("flag")
    return flag.split()[0].split("/")[0] if flag else None


def flag_spec(model: type[BaseModel], name: str) -> FlagSpec:
    """The command-line flag of field ``name`` of ``model``: its spellings, its help, its default, and
    the type the command line reads (its ``cli_type``, else its own)."""
    info = model.model_fields[name]
    extra = _extra(info)
    return FlagSpec(name, extra.get("cli_type", info.annotation), info.get_default(call_default_factory=True),
                    info.description or "", tuple(str(extra.get("flag") or "").split()))


class BackendOptions(BaseModel):
    """A backend's options: subclass it with one field per option (`option`: default, help, limits),
    and name the subclass as the backend's ``Options``. Every option has a default; an unknown key
    is an error. The model is frozen: a run's options do not change while it runs (and built when
    first checked: a backend no run uses costs no validator)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True, defer_build=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """A model that breaks a rule (`model_problem`: an option without a default) is refused where it
        is declared: the plugin's module fails to import, and its plugin is reported as failing to load."""
        super().__pydantic_init_subclass__(**kwargs)
        problem = model_problem(cls)
        if problem:
            raise TypeError(problem)


def pass_mark_of(options: BaseModel, metric: Optional[str] = None) -> Optional[float]:
    """The value of the option of ``options`` declared ``option(..., pass_mark=True)``: the pass mark
    of ``metric`` of its backend in this run (run.json's ``pass_marks``), or None when it has none.
    The option holds a number (every metric's pass mark) or a mapping of metric to number (None for a
    metric it leaves out: that metric keeps its default pass mark)."""
    for name, info in type(options).model_fields.items():
        if _extra(info).get("pass_mark"):
            value = getattr(options, name)
            if isinstance(value, dict):
                value = value.get(metric) if metric is not None else None
            return None if value is None else float(value)
    return None


def model_problem(model: type[BaseModel]) -> Optional[str]:
    """What is wrong with a backend's options model as a plugin declares it, or None: an option
    without a default (every option has one: a run that sets none must still be valid), more than
    one pass-mark option."""
    for name, info in model.model_fields.items():
        if info.is_required():
            return (f"option {name!r} of {model.__name__} has no default: declare it with "
                    f"option(DEFAULT, \"help\") (every option has a default)")
    marks = [n for n, info in model.model_fields.items() if _extra(info).get("pass_mark")]
    if len(marks) > 1:
        return f"{model.__name__} declares {len(marks)} pass-mark options ({', '.join(marks)}): declare one"
    return None


def _versioned(name: str, key: Optional[str]) -> str:
    """What an option given for a backend's library version (``mylib==1.2``) is told: where it goes."""
    base = name.partition("==")[0].strip() or "NAME"
    return ("a backend's options apply to every version of its library: give them under the backend's "
            f"name without ==VERSION (--option {base}.{key or 'KEY'}=VALUE, [backends.{base}])")


class OptionError(UserError, ValueError):
    """An option that is unknown or has a value it cannot take; the message names where it was given."""


# -- types, in words ---------------------------------------------------------------------------------


def _limits(metadata: Iterable[Any]) -> tuple[Any, Any]:
    low = high = None
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            low = m.ge
        elif isinstance(m, annotated_types.Gt):
            low = m.gt
        elif isinstance(m, annotated_types.Le):
            high = m.le
        elif isinstance(m, annotated_types.Lt):
            high = m.lt
    return low, high


_LISTS = (list, tuple, set, collections.abc.Sequence)
_MAPPINGS = (dict, collections.abc.Mapping)


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(unwrap(annotation)[0]) in _LISTS


def is_list_option(model: type[BaseModel], key: str) -> bool:
    """Whether option ``key`` of ``model`` is a list (given once per item on the command line)."""
    info = model.model_fields.get(key)
    return info is not None and _is_list(info.annotation)


def _words(annotation: Any, metadata: list[Any], article: bool) -> str:
    """What a value of ``annotation`` is, in words (``a whole number from 1 to 100``)."""
    annotation, more, _ = unwrap(annotation)
    metadata = [*metadata, *more]
    low, high = _limits(metadata)
    origin = typing.get_origin(annotation)
    a = (lambda s: ("an " if s[0] in "aeiou" else "a ") + s) if article else (lambda s: s)
    if origin is typing.Literal:
        text = "one of " + ", ".join(str(v) for v in typing.get_args(annotation))
    elif origin in (typing.Union, types.UnionType):
        text = ", or ".join(_words(arg, metadata, article) for arg in typing.get_args(annotation))
    elif origin in _LISTS:
        (item,) = typing.get_args(annotation)[:1] or (Any,)
        text = a("list") + " of " + _words(item, [], False).replace("text", "texts")
    elif origin in _MAPPINGS:
        key, value = typing.get_args(annotation) or (Any, Any)
        text = a("mapping") + f" of {_words(key, [], False)} to {_words(value, [], False)}"
    elif annotation is bool:
        text = "true or false"
    elif annotation in (int, float):
        noun = a("whole number" if annotation is int else "number")
        if low is not None and high is not None:
            text = f"{noun} from {low:g} to {high:g}"
        elif low is not None:
            text = f"{noun} of at least {low:g}"
        elif high is not None:
            text = f"{noun} of at most {high:g}"
        else:
            text = noun
    elif annotation is str:
        text = "text"
    elif annotation is Path:
        text = a("path")
    else:
        text = "any value"
    return text


def expected(info: FieldInfo) -> str:
    """What the field takes, in words: ``a whole number from 1 to 100``, ``one of linear,
    exponential``, ``true or false``."""
    return _words(info.annotation, list(info.metadata), True)


def type_text(info: FieldInfo) -> str:
    """The field's type, short, for a listing: ``whole number of at least 1``, ``one of mean, max``."""
    return _words(info.annotation, list(info.metadata), False)


def describe(model: type[BaseModel]) -> list[dict[str, Any]]:
    """Each option of ``model``: name, type (in words), default, help and its own flag (or None)."""
    out = []
    for name, info in model.model_fields.items():
        default = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
        out.append({"name": name, "type": type_text(info), "default": default,
                    "help": info.description or "", "flag": flag_of(info)})
    return out


# -- validation --------------------------------------------------------------------------------------


def field_error(model: type[BaseModel], exc: ValidationError, where: Callable[[str], str],
                given: Mapping[str, Any], owner: str = "") -> str:
    """One line for the first error of ``exc``: ``{where(key)} must be {expected}, got {value!r}``
    (or the validator's own words), or, for an option ``model`` does not have, the options it has
    (``owner``: whose options they are, e.g. ``the native backend``)."""
    error = exc.errors()[0]
    loc = error.get("loc") or ()
    key = str(loc[0]) if loc else ""
    if error["type"] == "extra_forbidden":
        known = ", ".join(model.model_fields)
        return (f"{where(key)}: {owner or 'it'} has no option {key!r}; "
                + (f"its options: {known}" if known else "it takes no options"))
    info = model.model_fields.get(key)
    value = given.get(key, error.get("input"))
    if error["type"] == "value_error":  # a validator's own words, e.g. "is not UTF-8 text"
        return f"{where(key)} {str(error.get('msg', '')).removeprefix('Value error, ')}"
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return f"{where(key)} must be {expected(info) if info is not None else 'valid'}, got {shown}"


def check(model: type[BaseModel], values: Mapping[str, Any], where: Callable[[str], str],
          cli: Optional[Callable[[str], str]] = None, error: type[Exception] = OptionError,
          owner: str = "") -> Any:
    """``model`` of ``values``, or ``error`` (an `OptionError`, or a `UserError` subclass) with one
    line naming the option as ``where`` does (and as ``cli`` does on the command line)."""
    try:
        return model.model_validate(dict(values))
    except ValidationError as exc:
        text = field_error(model, exc, where, values, owner)
        raise error(text, cli=field_error(model, exc, cli, values, owner) if cli else None) from None


def _from_text(model: type[BaseModel], key: str, texts: list[str], where: Callable[[str], str],
               owner: str) -> Any:
    """The value of option ``key`` given as text on the command line (once, or once per item of a
    list option), converted as its type says; JSON for a list or a mapping."""
    info = model.model_fields.get(key)
    if info is None:
        check(model, {key: texts[-1]}, where, owner=owner)  # the unknown option's error
    text = texts[-1]
    if text.lstrip()[:1] in ("[", "{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OptionError(f"{where(key)}: {text!r} is not JSON ({exc.msg}): give a list or a mapping as "
                              "JSON, or a list option once per item") from None
        return getattr(check(model, {key: value}, where, owner=owner), key)
    if _is_list(info.annotation):
        return getattr(check(model, {key: list(texts)}, where, owner=owner), key)
    try:
        return getattr(model.model_validate_strings({key: text}), key)
    except ValidationError as exc:
        try:  # a choice of numbers (3, 10, 1), which only the number's JSON converts to
            return getattr(model.model_validate({key: json.loads(text)}), key)
        except (ValueError, ValidationError):
            raise OptionError(field_error(model, exc, where, {key: text}, owner)) from None


def parse_assignment(text: str) -> tuple[str, str, str]:
    """``BACKEND.KEY=VALUE`` as (backend, key, value); OptionError for anything else."""
    head, versioned, rest = text.partition("==")
    if versioned and "." not in head:  # mylib==1.2.concurrency=2
        key = rest.partition("=")[0].rsplit(".", 1)[-1]
        raise OptionError(f"--option {text}: {_versioned(head, key if key.isidentifier() else None)}")
    target, eq, value = text.partition("=")
    backend, dot, key = target.strip().partition(".")
    if not eq or not dot or not backend.strip() or not key.strip():
        raise OptionError("--option takes BACKEND.KEY=VALUE (e.g. --option native.gain=exponential), "
                          f"got {text!r}")
    return backend.strip(), key.strip(), value


def backend_options(registry: Mapping[str, Any], sources: Iterable[tuple[str, Mapping[str, Any]]],
                    ) -> dict[str, BackendOptions]:
    """Each backend's options model, of ``sources`` merged in order (a later one over an earlier
    one), for each backend a source names. A source is ``(where, {backend: {key: value}})``, where
    ``where`` is ``"python"`` (a mapping or the backend's model), a file's path (its ``[backends]``
    tables), ``"--option"`` (the command line's texts: for each key, the list of the texts given) or a
    flag such as ``"--gain"`` (one value, typed by the command line). ``registry``: the backends by
    name (`ragbridge.plugins.get_backends`)."""
    merged: dict[str, dict[str, Any]] = {}
    for where, given in sources:
        for name, values in given.items():
            backend = registry.get(name)
            if backend is None:
                key = next(iter(values), None) if isinstance(values, Mapping) else None
                if "==" in name and name.partition("==")[0].strip() in registry:
                    raise OptionError(f"{_place(where, name, key)}: {_versioned(name, key)}")
                raise OptionError(f"{_place(where, name, key)}: unknown backend {name!r}; registered "
                                  f"backends: {', '.join(sorted(registry))}")
            model, owner = backend.Options, f"the {name} backend"
            if isinstance(values, BaseModel):
                if not isinstance(values, model):
                    raise OptionError(f"{_place(where, name)} must be a {model.__name__} (the {name} "
                                      f"backend's options) or a mapping, got a {type(values).__name__}")
                values = {k: getattr(values, k) for k in values.model_fields_set}
            elif not isinstance(values, Mapping):
                raise OptionError(f"{_place(where, name)} must be a mapping of the {name} backend's options, "
                                  f"got {values!r}")

            def at(key: str, name: str = name) -> str:
                return _place(where, name, key)

            if where == "--option":
                typed = {key: _from_text(model, key, texts, at, owner) for key, texts in values.items()}
            else:
                instance = check(model, values, at, owner=owner)
                typed = {key: getattr(instance, key) for key in values}
            merged.setdefault(name, {}).update(typed)
    return {name: check(registry[name].Options, values, lambda key, n=name: f"{n}.{key}",
                        owner=f"the {name} backend")
            for name, values in merged.items()}


def _place(where: str, backend: str, key: Optional[str] = None) -> str:
    """Where an option was given, as an error names it: ``native.gain`` (Python), ``--option
    native.gain``, ``--gain``, ``ragbridge.toml: [backends.native] gain``."""
    if where == "python":
        return f"{backend}.{key}" if key else f"options[{backend!r}]"
    if where == "--option":
        return f"--option {backend}.{key}" if key else f"--option {backend}.KEY=VALUE"
    if where.startswith("--"):
        return where
    return f"{where}: [backends.{backend}]" + (f" {key}" if key else "")


# -- ragbridge.toml ----------------------------------------------------------------------------------


def config_tables(section: str, config_file: Optional[Path] = None, cwd: Optional[Path] = None,
                  ) -> list[tuple[str, dict[str, Any]]]:
    """The ``[section]`` table of ``pyproject.toml``'s ``[tool.ragbridge]`` and of ``ragbridge.toml``
    (``config_file`` instead when given: an error when it does not exist), lowest first, each as
    (the file's path, the table). OptionError for a file that is not TOML or a section that is not a
    table of tables."""
    from .config_files import config_sections

    return [(str(path), _tables(value, path, where))
            for path, where, value in config_sections(section, config_file, cwd, OptionError)]


def _tables(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise OptionError(f"{path}: {where} must hold one table per backend, e.g. [backends.native]")
    return value
