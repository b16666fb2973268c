"""The Typer CLI, installed as pymemdb.cli (console scripts pymemdb and memori-cleanup)."""
