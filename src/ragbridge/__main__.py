"""``python -m ragbridge ARGS``: the command line, as the ``ragbridge`` console script runs it."""

from .commands import run_cli

if __name__ == "__main__":
    run_cli()
