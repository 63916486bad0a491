"""Rewrite ``src/posttrain/config/families.json`` from the ``@member`` decorators in the
source (``tests/unit/test_families.py`` fails while it is stale)."""

import json
from pathlib import Path

from posttrain.config.family import INDEX, scan

SRC = Path(__file__).resolve().parents[1] / "src"

if __name__ == "__main__":
    INDEX.write_text(json.dumps(scan(SRC), indent=1) + "\n")
    print(f"wrote {INDEX}")
