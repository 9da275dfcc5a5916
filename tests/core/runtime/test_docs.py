"""docs/runtime.md's examples run as shown: each ``python`` block prints its ``text`` block.

The blocks run in order in one namespace (the threaded example reuses the stepped one's
controller class), so the page cannot drift from the code it documents.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "runtime.md"
_EXAMPLE = re.compile(r"```python\n(?P<code>.*?)```\s*```text\n(?P<output>.*?)```", re.S)


def test_runtime_doc_examples_print_what_the_page_shows() -> None:
    examples = list(_EXAMPLE.finditer(DOC.read_text()))
    assert len(examples) == 2
    namespace: dict[str, object] = {"__name__": "runtime_doc_example"}
    for example in examples:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(example["code"], str(DOC), "exec"), namespace)
        assert printed.getvalue() == example["output"]
