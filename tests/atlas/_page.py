"""An atlas page's embedded data read back: the scatter's JSON with each head's map element gathered as ``maps``."""

from __future__ import annotations

import json
import re

_MAP = re.compile(r'<script type="application/json" id="atlas-map-(\d+)-(\d+)">(.*?)</script>', re.S)


def page_data(page: str) -> dict:
    """``atlas-data`` of ``page`` plus ``maps``: "layer,head" -> that head's map entry (block, length, cells)."""
    data = json.loads(page.split('id="atlas-data">')[1].split("</script>")[0])
    assert "maps" not in data  # the maps travel apart, an element per head
    data["maps"] = {f"{layer},{head}": json.loads(body) for layer, head, body in _MAP.findall(page)}
    return data
