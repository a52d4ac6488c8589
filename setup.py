"""The package's compiled modules (the rest is in pyproject.toml): chunk columns cut and joined and
score lines read in C (`ragbridge.formats.record_lines`, `ragbridge.formats.plain_records`,
`ragbridge.run.recorded`), plain values written as indented JSON (`ragbridge.json_text`) and the
resampling loops of `ragbridge.analysis.stats` (Kendall's merge over posterior draws, the bootstrap of
a mean, the permutation test's sign flips). Optional: where no C compiler is found the package
installs without them and those modules use the same steps written in Python and NumPy."""

from setuptools import Extension, setup

columns = Extension("ragbridge.formats._columns", ["src/ragbridge/formats/_columns.c"], optional=True)
json_text = Extension("ragbridge._json_text", ["src/ragbridge/_json_text.c"], optional=True)
stats = Extension("ragbridge.analysis._stats", ["src/ragbridge/analysis/_stats.c"], optional=True,
                  extra_compile_args=["-ffp-contract=off"])  # Kendall's merge: no fused multiply-add
setup(ext_modules=[columns, json_text, stats])
