"""The package's one compiled module (the rest is in pyproject.toml): chunk columns cut and joined in
C (`ragbridge.formats.record_lines`, `ragbridge.formats.plain_records`). Optional: where no C compiler
is found the package installs without it and those modules use the same steps written in Python."""

from setuptools import Extension, setup

columns = Extension("ragbridge.formats._columns", ["src/ragbridge/formats/_columns.c"], optional=True)
setup(ext_modules=[columns])
