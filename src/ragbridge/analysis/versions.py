"""What changed in the libraries between runs: the warning diff, trend and gate give when a backend's
library version differs between two runs (`version_change_warnings`, `version_steps` along a series),
and diff's answer when two runs hold one library at different versions under different backend names
(`nothing_in_common`: compare them side by side with ``compare A --with B``).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..run import Run

__all__ = ["version_change_warnings", "version_steps", "nothing_in_common"]


def nothing_in_common(base_run: Run, b_keys: set, new_run: Run, n_keys: set, selected: bool) -> str:
    """Why two runs cannot be diffed: the backends (or, where they share backends, the metrics) each
    has; where they hold one library at different versions (``mylib==1.2`` and ``mylib``), the
    command that compares them."""
    b_names, n_names = sorted({b for b, _ in b_keys}), sorted({b for b, _ in n_keys})
    said = "the two runs have no (backend, metric) in common" + (" among those selected" if selected else "")
    if set(b_names) & set(n_names):
        return (said + f": base has {', '.join(f'{b}:{m}' for b, m in sorted(b_keys))}; "
                f"new has {', '.join(f'{b}:{m}' for b, m in sorted(n_keys))}")

    def named(run: Run, names: list[str]) -> str:
        at = {b: run.manifest.backends.get(b) for b in names}
        return ", ".join(b + (f" ({at[b]})" if at[b] and "==" not in b else "") for b in names) or "none"

    said += f": base has backend(s) {named(base_run, b_names)}; new has {named(new_run, n_names)}"
    library = {b.split("==")[0] for b in b_names} & {b.split("==")[0] for b in n_names}
    if library:
        said += (f". They hold {', '.join(sorted(library))} at different versions: to compare versions "
                 f"scored in different runs, run ragbridge compare {base_run.path} --with {new_run.path}")
    return said


def version_change_warnings(base_run: Run, new_run: Run, backends: Iterable[str]) -> list[str]:
    """``backend B version changed: OLD -> NEW`` for each of ``backends`` whose library version (in
    the runs' ``run.json``) differs between the runs: diff, trend and gate warn with it."""
    out = []
    for b in sorted(backends):
        vb, vn = base_run.manifest.backends.get(b), new_run.manifest.backends.get(b)
        if vb != vn:
            out.append(f"backend {b} version changed: {vb} -> {vn}")
    return out


def version_steps(ordered: Sequence[Run], backends: set[str]) -> list[str]:
    """Where a backend's library version changes along ``ordered`` (each run against the run before
    it that ran the backend): ``RUN: backend B version changed: OLD -> NEW`` (a step of the series
    that may be the library's, not the system's)."""
    out, last = [], {}
    for r in ordered:
        for b in sorted(backends & set(r.manifest.backends)):
            if b in last:
                out += [f"{r.path}: {w}" for w in version_change_warnings(last[b], r, [b])]
            last[b] = r
    return out
