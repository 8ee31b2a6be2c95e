"""A module written in the docs, as a user would save it: importable from a folder, with the commands shown
beside it."""

import re
import sys
from pathlib import Path


def doc_module(page: Path, heading: str, name: str, folder: Path, monkeypatch) -> list[list[str]]:
    """Save the first Python block of the section ``heading`` of ``page`` as ``folder/name.py``, importable (put on
    sys.path by ``monkeypatch``, any earlier import of it forgotten), and return the commands of that section's first
    bash block, each split into words (comments dropped)."""
    text = page.read_text(encoding="utf-8")
    section = re.search(rf"^{re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S).group(1)
    code = re.findall(r"^```python\n(.*?)^```", section, flags=re.M | re.S)[0]
    bash = re.findall(r"^```bash\n(.*?)^```", section, flags=re.M | re.S)[0]
    (folder / f"{name}.py").write_text(code)
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop(name, None)
    return [line.split("#")[0].split() for line in bash.strip().splitlines()]
