"""The test run's own configuration: a thread that dies fails the test (issue 16, item 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DYING_THREAD = '''
import threading


def test_a_writer_thread_dies():
    writer = threading.Thread(target=lambda: 1 / 0)
    writer.start()
    writer.join()
'''


def test_an_unhandled_exception_in_a_thread_fails_the_run(tmp_path: Path) -> None:
    """Runs pytest with this project's configuration on a test whose thread raises."""
    (tmp_path / "test_dying.py").write_text(DYING_THREAD)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
         str(tmp_path / "test_dying.py")],
        capture_output=True, text=True, check=False, timeout=120, cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout and "ZeroDivisionError" in done.stdout
