"""`pymemdb demo` and `pymemdb demo vm`: scripted walks through the seeds in scratch databases.

Presentation code (rich), so it lives with the CLI and stays off the library's
import path: ``import pymemdb`` never needs rich or typer.
"""
