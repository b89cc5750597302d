"""The README's Python blocks, for the tests that parse and run them."""
import os
import re

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def python_blocks() -> list:
    """The ```python blocks of README.md's "## Python" section, in order."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("\n## Python\n"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)
