"""`python -m pymemdb ...` is the `pymemdb` command (works without the scripts dir on PATH)."""

from pymemdb.cli.main import app

app(prog_name="pymemdb")
