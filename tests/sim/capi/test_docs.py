"""docs/capi-emulation.md's example runs as shown: its ``python`` block prints its ``text``."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "capi-emulation.md"
_EXAMPLE = re.compile(r"```python\n(?P<code>.*?)```\s*```text\n(?P<output>.*?)```", re.S)


def test_the_capi_emulation_example_prints_what_the_page_shows() -> None:
    [example] = list(_EXAMPLE.finditer(DOC.read_text()))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example["code"], str(DOC), "exec"), {"__name__": "capi_doc_example"})
    assert printed.getvalue() == example["output"]
